"""Responses of one session: start, model output, completion, cancellation, playback.

Part of the session runner (single writer), through its ``SessionContext``; every
method runs on the orchestrator loop.

A response's audio goes out through the session's ``Playback`` (``playback.py``): paced
at real time plus the lead, however fast the model made it. A response the model has
finished stays active until its last audio has left, so ``response.done`` tells the
truth and a talk-over while it plays cancels it. What the user heard is the played
position: a cancelled response is cut there (its unplayed audio never leaves,
``output_audio_buffer.cleared``), and its item keeps the transcript up to that point
(``conversation.item.truncated`` says where). Unpaced sessions release everything at
once and keep the client's word for what was played, as before pacing existed.
A response's calls of remote MCP tools are ``McpResponses``'s (``mcp_responses.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....protocol.duplex import (
    OutputAudioEncoder,
    RealtimeProtocolError,
    b64encode_str,
    truncate_transcript,
)
from ....protocol.duplex import commands as cmd
from ..contracts import StageSubmission, stage_request_id
from ..mcp.tool_spec import MCP_TOOL_TYPE
from ..plugin import (
    ModelAudio,
    ModelError,
    ModelInputTranscript,
    ModelListen,
    ModelSpeak,
    ModelText,
    ModelToolCall,
    ResponseRequest,
)
from ..settings import check_tool_choice, check_tools
from .context import SessionContext, StageOutputItem
from .conversation import StoredItem, chat_messages
from .lease import LeaseActivity
from .mcp_responses import McpResponses, ToolOffer
from .part_events import InputTranscribed, ResponseEnded
from .playout import AudioUnit
from .state import (
    ActiveResponse,
    TurnStep,
    function_call_item,
    new_item_id,
    new_response_id,
)

# Cancel reasons that came from the server's own turn detection rather than the client.
_SERVER_DETECTED = frozenset({"turn_detected"})

# Per-response options a plugin must support, else they are refused naming the param.
# ``instructions`` is not among them: like the session's instructions, a model that follows
# none (loopback, the rule responder) takes them without acting on them, as OpenAI's
# clients expect (LiveKit's "speak first" sends them with every generate_reply).
_OPTION_FLAGS = {
    "temperature": "supports_response_temperature",
    "max_output_tokens": "supports_response_max_output_tokens",
    "voice": "supports_response_voice",
}


class ResponseFlow(McpResponses):
    """The runner's part that runs the session's responses, one active at a time."""

    def __init__(self, ctx: SessionContext, *, max_unplayed_output_bytes: int) -> None:
        self.ctx = ctx
        self.session = ctx.session
        self.out = ctx.out
        self.plugin = ctx.plugin
        self.playback = ctx.playback
        self.max_unplayed_output_bytes = max_unplayed_output_bytes

    # ---- starting -----------------------------------------------------------------

    def on_create(self, command: cmd.CreateResponse) -> None:
        session = self.session
        options = dict(command.options or {})
        try:
            if options.get("tools") is not None:
                options["tools"] = check_tools(options["tools"], "response.tools")
            if options.get("tool_choice") is not None:
                choice = check_tool_choice(options["tool_choice"], "response.tool_choice")
                options["tool_choice"] = choice
            self._check_response_mcp_tools(options.get("tools") or [])
        except RealtimeProtocolError as exc:
            self.out.error(exc.code, exc.message, event_id=command.event_id, param=exc.param)
            return
        refused = self._refused_option(options)
        if refused is not None:
            self.out.error(
                "unsupported_response_option",
                f"this model does not support response.{refused}",
                event_id=command.event_id,
                param=f"response.{refused}",
            )
            return
        if session.response is not None:
            # One response at a time, out-of-band ones included: OpenAI documents no
            # exception for them, and a session has one output stream to play them on.
            self.out.error(
                "conversation_already_has_active_response",
                "Conversation already has an active response in progress: "
                f"{session.response.response_id}. Wait until the response is finished "
                "before creating a new one.",
                event_id=command.event_id,
            )
            return
        context = None
        if options.get("input") is not None:
            context = self._context(options["input"], command.event_id)
            if context is None:
                return
        self.start(options=options, context=context)

    def _context(self, entries: list[dict[str, Any]], event_id: str | None) -> list[Any] | None:
        """``response.input`` as items: an ``item_reference`` becomes the conversation's
        item; one naming no item is refused (``None``) naming its param."""
        items: list[Any] = []
        for index, entry in enumerate(entries):
            if entry.get("type") != "item_reference":
                items.append(entry)
                continue
            stored = self.session.items.get(entry["id"])
            if stored is None:
                self.out.error(
                    "item_not_found",
                    f"response.input[{index}] names no item in the conversation: {entry['id']}",
                    event_id=event_id,
                    param=f"response.input[{index}].id",
                )
                return None
            items.append(stored.item)
        return items

    def _refused_option(self, options: dict[str, Any]) -> str | None:
        caps = self.session.capabilities
        for key, flag in _OPTION_FLAGS.items():
            if options.get(key) is not None and not getattr(caps, flag):
                return key
        if options.get("max_response_output_tokens") is not None and not getattr(
            caps, _OPTION_FLAGS["max_output_tokens"]
        ):
            return "max_response_output_tokens"
        if options.get("input") is not None and self.plugin.streams_input:
            # A model-native response is a stretch of the session's one input stream.
            return "input"
        return None

    def start(
        self,
        *,
        options: dict[str, Any] | None = None,
        carried_by: str | None = None,
        context: list[Any] | None = None,
    ) -> None:
        """Open a response for the committed input (or user text) and submit it.

        ``carried_by``: the committed turn was transcribed while spoken; that stage
        request already holds the audio and carries this response. ``context``: the
        items of ``response.input``, the response's whole context instead of the
        conversation (its last user message is what it answers).
        """
        session = self.session
        plugin = self.plugin
        options = options or {}
        response = self._open(options)
        # Nothing new from the user: the model speaks first (or again) from the conversation
        # and the session's instructions, as OpenAI's does.
        history = session.items.messages() if context is None else chat_messages(context)
        response.base_history = history
        if context is not None or not response.in_conversation:
            # Beside the conversation: the user's pending turn stays for the conversation's
            # own response. Given items, the last user message among them is answered;
            # otherwise the pending text is read, not taken (audio is only ever taken).
            audio = _EMPTY
            text = _last_user_text(history) if context is not None else session.pending_user_text
            opening = not text
        else:
            audio = session.committed_input if session.committed_input is not None else _EMPTY
            text = session.pending_user_text
            opening = session.committed_input is None and not text
            session.committed_input = None
            session.pending_user_text = ""
        response.input_audio_ms = audio.size * 1000 / plugin.input_sample_rate_hz
        response.input_text = text
        if plugin.streams_input:
            # Model-native plugins (streams_input) feed every response from the session's
            # resumable stage-0 request; a response is a stretch of that stream, so there
            # is no per-response stage request to plan or submit.
            return
        offer = self._tools(options)
        response.mcp_tools = offer.mcp_owners
        request = self._request(
            response.response_id,
            options,
            offer,
            history=history,
            audio=_EMPTY if carried_by is not None else audio,
            text=text,
            input_streamed=carried_by is not None,
            opening=opening and carried_by is None,
        )
        if carried_by is not None:
            request_id = carried_by
        else:
            request_id = stage_request_id(session.fence, f"resp{session.response_counter}")
        self._submit(response, request_id, request)

    def _submit(self, response: ActiveResponse, request_id: str, request: ResponseRequest) -> None:
        session = self.session
        response.request_ids.append(request_id)
        response.model_generating = True
        try:
            data = self.plugin.plan_response(session.model_state, request)
            # A carried request is the utterance's, which the hand-over checked is of
            # this epoch.
            self.ctx.stage.submit(StageSubmission(request_id, 0, data, session.fence, final=True))
        except Exception as exc:
            self.fail("model_backend_failed", f"could not start the response: {exc}")

    def _open(self, options: dict[str, Any]) -> ActiveResponse:
        """A new active response, announced (``response.created``)."""
        session = self.session
        plugin = self.plugin
        modalities = tuple(
            options.get("output_modalities")
            or options.get("modalities")
            or session.settings.modalities
        )
        response_id = new_response_id()
        response = ActiveResponse(
            response_id=response_id,
            item_id=f"item_{response_id}",
            input_commit_seq=session.commit_seq,
            modalities=modalities,
            conversation=str(options.get("conversation") or "auto"),
            metadata=_string_metadata(options.get("metadata")),
        )
        response.encoder = OutputAudioEncoder(
            plugin.output_sample_rate_hz,
            session.settings.output_format,
            session.settings.output_rate_hz,
        )
        self.playback.begin(response)
        session.idle.floor_taken()
        session.advance(TurnStep.RESPONSE_START, response)
        session.response_counter += 1
        session.last_response_id = response_id
        self.out.response_started(response)
        response.options = options
        return response

    def preview_request(self) -> ResponseRequest | None:
        turn_detection = self.session.settings.turn_detection or {}
        if not turn_detection.get("create_response", True):
            return None
        text = self.session.pending_user_text
        history = self.session.items.messages()
        return self._request(
            "",
            {},
            self._tools({}),
            history=history,
            audio=_EMPTY,
            text=text,
            input_streamed=True,
            opening=False,
        )

    def _request(
        self,
        response_id: str,
        options: dict[str, Any],
        offer: ToolOffer,
        *,
        history: list[dict[str, Any]],
        audio: np.ndarray,
        text: str,
        input_streamed: bool,
        opening: bool,
    ) -> ResponseRequest:
        session = self.session
        return ResponseRequest(
            fence=session.fence,
            response_id=response_id,
            input_audio=audio,
            input_text=text,
            history=history,
            options=options,
            session=session.settings.as_model_config(),
            input_streamed=input_streamed,
            opening=opening,
            tools=offer.tools,
            tool_choice=offer.choice,
        )

    def _tools(self, options: dict[str, Any]) -> ToolOffer:
        """The tools this response may call (the response's own, else the session's) and
        its tool choice; none for a model that calls no tools. A declared MCP server
        stands for the tools it listed, offered as function tools."""
        if not self.session.capabilities.supports_tools:
            return ToolOffer([], "none", {})
        settings = self.session.settings
        declared = options.get("tools")
        declared = settings.tools if declared is None else declared
        choice = options.get("tool_choice")
        functions = [tool for tool in declared if tool.get("type") != MCP_TOOL_TYPE]
        labels = {tool["server_label"] for tool in declared if tool.get("type") == MCP_TOOL_TYPE}
        remote, owners = self.ctx.mcp.function_tools(labels) if labels else ([], {})
        taken = {tool.get("name") for tool in functions}
        remote = [tool for tool in remote if tool["name"] not in taken]
        owners = {name: label for name, label in owners.items() if name not in taken}
        return ToolOffer(
            functions + remote, settings.tool_choice if choice is None else choice, owners
        )

    # ---- model output -----------------------------------------------------------

    def on_stage_output(self, item: StageOutputItem) -> None:
        response = self.session.response
        if item.error is not None:
            if response is not None and item.request_id in response.request_ids:
                self.fail("model_backend_failed", item.error)
            else:
                self.out.error("model_backend_failed", item.error)
            return
        owned = response is not None and item.request_id in response.request_ids
        if not self.plugin.streams_input and not owned:
            # A turn-based response only hears its own requests: output of one that ended
            # in the same epoch (a failure does not advance it) must not leak into the next.
            return
        if owned:
            response.stage_steps += 1
            response.stage_compute_s += item.compute_s
        for result in self.plugin.data_plane.project(item.data):
            if self.session.response is None and isinstance(result, ModelAudio | ModelText):
                if not self.plugin.streams_input:
                    return  # output of a response that already ended
                self.start(options={})
            self._on_result(result, item.request_id)

    def _on_result(self, result: Any, request_id: str) -> None:
        response = self.session.response
        if isinstance(result, ModelAudio):
            self._on_audio(response, result)
            if result.end_of_turn:
                self.complete("completed")
        elif isinstance(result, ModelText):
            self._open_message(response)
            self.out.text_delta(response, result.delta)
            response.text.append(result.delta)
            if result.end_of_turn:
                self.complete("completed")
        elif isinstance(result, ModelListen):
            said_nothing = response is not None and response.audio_ms == 0 and not response.text
            if response is not None and (said_nothing or self.plugin.streams_input):
                # A model-native plugin ends its stretch of speech by deciding to listen.
                self.complete("completed", reason=result.reason, listen=True)
            elif response is None:
                self.out.listen(result.reason, None)
        elif isinstance(result, ModelSpeak):
            if response is not None and not response.speak_emitted:
                self._open_message(response)
                response.speak_emitted = True
                self.out.speak(response)
        elif isinstance(result, ModelInputTranscript):
            self.ctx.tell(InputTranscribed(result, request_id))
        elif isinstance(result, ModelError):
            self.fail(result.code, result.message)
        elif isinstance(result, ModelToolCall) and response is not None:
            self._on_tool_call(response, result)

    def _open_message(self, response: ActiveResponse) -> None:
        """Open the response's assistant message item, once, at the next output index."""
        if response.message_index is None:
            response.message_index = response.outputs_opened
            response.outputs_opened += 1
            self.out.message_opened(response)

    def _on_tool_call(self, response: ActiveResponse, result: ModelToolCall) -> None:
        """A function call item: opened on its first piece, its arguments streamed, and
        once done, kept in history for the output the client will send. A call of a
        remote MCP tool is the server's to make instead (``_on_mcp_tool_call``)."""
        known = response.calls.get(result.call_id) is not None
        label = response.mcp_tools.get(result.name)
        if result.call_id in response.mcp_calls or (label is not None and not known):
            self._on_mcp_tool_call(response, result, label)
            return
        call = response.calls.get(result.call_id)
        if call is None:
            call = {
                "id": new_item_id(),
                "call_id": result.call_id,
                "name": result.name,
                "arguments": "",
                "status": "in_progress",
                "output_index": response.outputs_opened,
            }
            response.outputs_opened += 1
            response.calls[result.call_id] = call
            self.out.function_call_started(response, call)
        if call["status"] != "in_progress":
            return
        if result.arguments:
            call["arguments"] += result.arguments
            self.out.function_call_delta(response, call, result.arguments)
        if result.done:
            call["status"] = "completed"
            self.out.function_call_done(response, call)
            if response.in_conversation:
                item = function_call_item(call)
                self.session.items.add(StoredItem(item=item, response_id=response.response_id))

    def _on_audio(self, response: ActiveResponse, result: ModelAudio) -> None:
        session = self.session
        samples = np.asarray(result.samples, dtype=np.float32)
        encoded = response.encoder.encode(samples) if response.wants_audio else b""
        response.audio_ms += 1000.0 * samples.size / self.plugin.output_sample_rate_hz
        if result.text:
            response.transcript.append(result.text)
        chars = len(response.transcript_text())
        audio_end_ms = round(response.audio_ms)
        response.marks.append({"text_chars": chars, "audio_end_ms": audio_end_ms})
        cursor = session.cursor(response.response_id)
        cursor.generated_ms = audio_end_ms
        session.advance(TurnStep.RESPONSE_AUDIO)
        self._open_message(response)
        if not response.speak_emitted:
            response.speak_emitted = True
            self.out.speak(response)
        if not response.wants_audio:
            cursor.sent_ms = audio_end_ms
            self.out.transcript_only_delta(response, result.text)
            return
        self.playback.push(AudioUnit(b64encode_str(encoded), result.text, audio_end_ms, chars))
        if self.playback.pending_chars > self.max_unplayed_output_bytes:
            self.fail(
                "output_audio_backlog_full",
                f"the response generated more than {self.max_unplayed_output_bytes} bytes "
                "of audio ahead of its playout",
            )
            return
        self._play()

    def _play(self) -> None:
        """Release the active response's audio that is due; end the response once the
        model is done and all of it has left; wake again when more is due."""
        response = self.session.response
        if response is None:
            return
        self.playback.release(response)
        ended = response.generation_ended
        if ended is not None and not self.playback.pending:
            status, reason = ended
            self._finish(response, status=status, reason=reason)
            return
        self.playback.wake_when_due()

    def on_playout_due(self) -> None:
        """The runner's playout timer fired."""
        if self.session.response is not None:
            self._play()
            return
        self.playback.on_due()

    # ---- ending -------------------------------------------------------------------

    def complete(self, status: str, *, reason: str | None = None, listen: bool = False) -> None:
        """The model is done with the active response; it ends once its audio has left.
        ``listen``: the model decided to listen, which ``response.listen`` says at that
        end, after the audio it follows (paced, that audio may still be due)."""
        response = self.session.response
        if response is None or response.generation_ended is not None:
            return
        response.model_generating = False
        if response.answer_owed or any(e.running for e in response.mcp_calls.values()):
            # Its MCP calls are still to be spoken: the model goes on once they are back.
            self._answer_tools(response)
            return
        if listen:
            response.listen_reason = reason
        tail = response.encoder.flush() if response.wants_audio else b""
        if tail and response.audio_ms > 0:
            chars = len(response.transcript_text())
            self.playback.push(AudioUnit(b64encode_str(tail), "", round(response.audio_ms), chars))
        response.generation_ended = (status, reason)
        self._play()

    def fail(self, code: str, message: str) -> None:
        response = self.session.response
        self.out.error(code, message, retryable=False)
        if response is None:
            return
        self._abort(response)
        self.playback.stop(response)
        self._finish(response, status="failed", reason=code, error_message=message)

    def cancel(self, reason: str, *, clear_output: bool = False) -> bool:
        """Cancel the active response: epoch first, then abort, then terminal events.
        Paced, it is cut at the played position and its item truncated there."""
        session = self.session
        response = session.response
        if response is None:
            return False
        session.advance_epoch()
        self._abort(response)
        response.encoder.reset()
        played = self.playback.stop(response)
        if clear_output and played is None:
            self.out.output_audio_cleared(response.response_id)
        self._finish(response, status="cancelled", reason=reason)
        if played is not None and response.in_conversation:
            self.out.item_truncated(response.item_id, 0, played)
        return True

    def talked_over(self, reason: str) -> bool:
        if self.cancel(reason):
            return True
        return self.playback.cut_played_out()

    def hold_playout(self) -> bool:
        if self.session.response is None:
            return False
        self.playback.hold()
        return True

    def resume_playout(self) -> None:
        if self.playback.resume():
            self._play()

    def _finish(
        self,
        response: ActiveResponse,
        *,
        status: str,
        reason: str | None,
        error_message: str | None = None,
    ) -> None:
        session = self.session
        self._close_mcp_calls(response)
        if not response.calls and not response.mcp_calls:
            # A response that said nothing still has its (empty) assistant message.
            self._open_message(response)
        for call in response.calls.values():
            if call["status"] == "in_progress":
                # Cut off mid-call (a cancel, a talk-over, a failure): never to be answered.
                call["status"] = "incomplete"
                self.out.function_call_done(response, call)
        if response.listen_reason is not None:
            self.out.listen(response.listen_reason, response)
        cursor = session.cursor(response.response_id)
        transcript = response.transcript_text()
        shown = transcript
        if status == "cancelled":
            # Playback truth: the item keeps what the client acknowledged hearing.
            shown = truncate_transcript(
                transcript, cursor.committed_ms, int(response.audio_ms), response.marks
            )
        metrics = {
            "stage_steps": response.stage_steps,
            "stage_compute_ms": round(response.stage_compute_s * 1000.0, 3),
            "audio_ms": round(response.audio_ms),
            "latency_ms": None,
        }
        self.out.response_finished(
            response,
            status=status,
            reason=reason,
            transcript=transcript,
            shown_transcript=shown,
            error_message=error_message,
            stage_metrics=metrics,
        )
        if response.in_conversation and response.message_index is not None:
            self._store_assistant_item(response, status, transcript)
        session.advance(TurnStep.RESPONSE_END)
        self.playback.response_ended(response, status)
        self.ctx.tell(ResponseEnded(tuple(response.request_ids)))
        if status == "completed":
            session.turn_id += 1
        deferred = session.deferred_commit
        if deferred is not None and status != "failed":
            # The turn committed while this response was active is answered now.
            session.deferred_commit = None
            session.committed_input = deferred
            self.start()
        elif session.deferred_approvals:
            approval = session.items.get(session.deferred_approvals.pop(0))
            if approval is not None:
                self.on_mcp_approval(approval.item)

    def _store_assistant_item(self, response: ActiveResponse, status: str, transcript: str) -> None:
        settings = self.session.settings
        audio_ms, committed = self.playback.heard_ms(response, status)
        if settings.playback_commit_policy == "ack_only" and audio_ms > 0:
            heard = truncate_transcript(transcript, committed, audio_ms, response.marks)
        else:
            heard = transcript
        item = _assistant_item(response, status, heard, audio_ms)
        stored = StoredItem(
            item=item,
            full_transcript=transcript,
            audio_duration_ms=audio_ms,
            marks=list(response.marks),
            response_id=response.response_id,
            input_commit_seq=response.input_commit_seq,
        )
        self.session.items.add(stored)

    def abandon(self) -> list[str]:
        """Drop the active response silently (session closing); returns its request ids."""
        response = self.session.response
        if response is None:
            return []
        self.session.advance(TurnStep.RESPONSE_ABANDON)
        self._abort(response)
        self.playback.abandon()
        return list(response.request_ids)

    def _abort(self, response: ActiveResponse) -> None:
        """Abort a response's stage requests; they need no cleanup at close any more."""
        self.ctx.stage.abort(response.request_ids)

    # ---- cancel commands --------------------------------------------------------

    def on_cancel_response(self, command: cmd.CancelResponse) -> None:
        response = self.session.response
        if response is None or (
            command.response_id is not None and command.response_id != response.response_id
        ):
            asked = f" with id {command.response_id}" if command.response_id else ""
            self.out.error(
                "response_cancel_not_active",
                f"Cancellation failed: no active response found{asked}",
                event_id=command.event_id,
            )
            return
        self.cancel("client_cancelled")

    def on_clear_output(self, command: cmd.ClearOutputAudio) -> None:
        response = self.session.response
        if response is not None and (
            command.response_id is None or command.response_id == response.response_id
        ):
            self.cancel("output_audio_buffer_clear", clear_output=True)
            return
        if self.playback.cut_played_out():
            return  # the last response's audio still playing out: cut, and cleared said
        self.out.output_audio_cleared(command.response_id or self.session.last_response_id)

    def barge_in(self, reason: str, *, had_input: bool) -> None:
        """Cancel the active response (the runner dropped the input in flight first,
        ``had_input``: there was some); every cancel is answered."""
        session = self.session
        if not self.cancel(reason):
            self.playback.cut_played_out()
            session.advance_epoch()
            self.out.input_cleared()
        elif had_input:
            self.out.input_cleared()

    # ---- playback and items ---------------------------------------------------------

    def on_playback_ack(self, command: cmd.AckPlayback) -> None:
        try:
            self.session.lease.touch(self.ctx.clock(), LeaseActivity.PLAYBACK_ACK)
        except Exception:
            return
        self.playback.acknowledge(command)


_EMPTY = np.zeros(0, dtype=np.float32)


def _string_metadata(raw: Any) -> dict[str, str] | None:
    # The codec let through string pairs only (check_metadata): a copy, echoed as sent.
    return dict(raw) if isinstance(raw, dict) else None


def _last_user_text(history: list[dict[str, Any]]) -> str:
    """What a response given ``response.input`` answers: its last message, if the user's."""
    if history and history[-1].get("role") == "user":
        return str(history[-1].get("content") or "")
    return ""


def _assistant_item(
    response: ActiveResponse, status: str, transcript: str, audio_ms: int
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if response.wants_audio or transcript:
        content.append({"type": "output_audio", "transcript": transcript})
    if response.text:
        content.append({"type": "output_text", "text": response.text_output()})
    return {
        "id": response.item_id,
        "object": "realtime.item",
        "type": "message",
        "role": "assistant",
        "status": "completed" if status == "completed" else "incomplete",
        "content": content,
    }
