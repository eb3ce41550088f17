"""Builds the typed events of one session and hands them to its sink, in program order.

Every event is stamped with the session id and the epoch it was emitted under. Payloads
are built here from the session's ledgers, so the wire never sees an internal key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ....protocol.duplex import events as ev
from .state import function_call_item

if TYPE_CHECKING:
    from .state import ActiveResponse, DuplexEngineSession, McpCallEntry


class SessionEmitter:
    def __init__(self, session: DuplexEngineSession, sink: Callable[[Any], None]) -> None:
        self.session = session
        self._sink = sink

    def emit(self, event: Any) -> None:
        event.session_id = self.session.session_id
        event.epoch = self.session.epoch
        self._sink(event)

    # ---- session ---------------------------------------------------------------

    def public_session(self) -> dict[str, Any]:
        return self.session.settings.public_object(self.session)

    def session_created(self) -> None:
        self.emit(ev.SessionCreated(session=self.public_session()))

    def session_updated(self) -> None:
        self.emit(ev.SessionUpdated(session=self.public_session()))

    def session_terminal(self, reason: str, *, expired: bool) -> None:
        sid = self.session.session_id
        if expired:
            self.emit(ev.SessionExpired(session_id=sid, reason=reason))
        else:
            self.emit(ev.SessionClosed(session_id=sid, reason=reason))

    def heartbeat_ack(self) -> None:
        self.emit(ev.SessionHeartbeatAck(session_id=self.session.session_id))

    def error(
        self,
        code: str,
        message: str,
        *,
        event_id: str | None = None,
        param: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        extra = {"retryable": retryable} if retryable is not None else None
        self.emit(ev.ErrorEvent.build(code, message, event_id=event_id, param=param, extra=extra))

    # ---- input -------------------------------------------------------------------

    def speech_started(self, audio_start_ms: int, item_id: str | None) -> None:
        self.emit(ev.InputAudioBufferSpeechStarted(audio_start_ms=audio_start_ms, item_id=item_id))

    def speech_stopped(self, audio_end_ms: int, item_id: str | None) -> None:
        self.emit(ev.InputAudioBufferSpeechStopped(audio_end_ms=audio_end_ms, item_id=item_id))

    def timeout_triggered(self, audio_start_ms: int, audio_end_ms: int, item_id: str) -> None:
        self.emit(
            ev.InputAudioBufferTimeoutTriggered(
                audio_start_ms=audio_start_ms, audio_end_ms=audio_end_ms, item_id=item_id
            )
        )

    def input_cleared(self) -> None:
        self.emit(ev.InputAudioBufferCleared())

    def user_item_committed(
        self, item: dict[str, Any], previous: str | None, transcript: str
    ) -> None:
        self.emit(ev.ConversationItemAdded(previous_item_id=previous, item=item))
        self.emit(ev.ConversationItemCreated(previous_item_id=previous, item=item))
        self.emit(
            ev.InputAudioBufferCommitted(
                previous_item_id=previous,
                item_id=item["id"],
                event={"commit_seq": self.session.commit_seq, "epoch": self.session.epoch},
            )
        )
        if transcript:
            self.input_transcribed(item["id"], transcript)
        self.emit(ev.ConversationItemDone(previous_item_id=previous, item=item))

    def input_transcript_delta(
        self, item_id: str, delta: str, logprobs: list[dict[str, Any]] | None = None
    ) -> None:
        self.emit(
            ev.ConversationItemInputAudioTranscriptionDelta(
                item_id=item_id, content_index=0, delta=delta, logprobs=logprobs
            )
        )

    def input_transcribed(
        self, item_id: str, transcript: str, logprobs: list[dict[str, Any]] | None = None
    ) -> None:
        self.emit(
            ev.ConversationItemInputAudioTranscriptionCompleted(
                item_id=item_id, content_index=0, transcript=transcript, logprobs=logprobs
            )
        )

    def item_added(self, item: dict[str, Any], previous: str | None, *, done: bool) -> None:
        self.emit(ev.ConversationItemAdded(previous_item_id=previous, item=item))
        self.emit(ev.ConversationItemCreated(previous_item_id=previous, item=item))
        if done:
            self.emit(ev.ConversationItemDone(previous_item_id=previous, item=item))

    def item_deleted(self, item_id: str) -> None:
        self.emit(ev.ConversationItemDeleted(item_id=item_id, event={"deleted": True}))

    def item_retrieved(self, item: dict[str, Any]) -> None:
        self.emit(ev.ConversationItemRetrieved(item=item))

    def item_truncated(self, item_id: str, content_index: int, audio_end_ms: int) -> None:
        self.emit(
            ev.ConversationItemTruncated(
                item_id=item_id,
                content_index=content_index,
                audio_end_ms=audio_end_ms,
                event={"truncated": True},
            )
        )

    def overlap_decision(self, policy: str, action: str, reason: str) -> None:
        self.emit(
            ev.OverlapDecision(
                session_id=self.session.session_id,
                policy=policy,
                action=action,
                reason=reason,
                metadata={"overlap_speech_ms": self.session.overlap_speech_ms},
            )
        )

    def turn_event(self, event: str, turn_state: str) -> None:
        self.emit(
            ev.TurnEvent(session_id=self.session.session_id, event=event, turn_state=turn_state)
        )

    def turn_decision(self, decision: Any) -> None:
        """``duplex.turn.decision`` (extensions only): one semantic_vad end-of-turn
        decision, its inputs and what came of the pause (``TurnDecision``)."""
        details = {
            "type": "turn.decision",
            "audio_ms": decision.audio_ms,
            "words": decision.words,
            "prosody": round(decision.probability, 4),
            "semantic": None if decision.semantic is None else round(decision.semantic, 4),
            "verdict": decision.verdict,
            "wait_ms": decision.wait_ms,
            "silence_ms": decision.silence_ms,
            "outcome": decision.outcome,
        }
        self.emit(ev.RawDuplexEvent(event=details))

    def playback_acknowledged(self, **details: Any) -> None:
        details = {"type": "playback.acknowledged", "epoch": self.session.epoch, **details}
        self.emit(ev.PlaybackAcknowledged(event=details))

    # ---- responses -------------------------------------------------------------------

    def _response_object(
        self, response: ActiveResponse, status: str, **extra: Any
    ) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": response.response_id,
            "object": "realtime.response",
            "status": status,
            "status_details": None,
            "output": [],
            "output_modalities": list(response.modalities),
            "metadata": response.metadata,
        }
        obj.update(extra)
        return obj

    def _in_progress_item(self, response: ActiveResponse) -> dict[str, Any]:
        return {
            "id": response.item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }

    def response_started(self, response: ActiveResponse) -> None:
        rid = response.response_id
        self.emit(
            ev.ResponseCreated(
                response=self._response_object(response, "in_progress"), response_id=rid
            )
        )

    def message_opened(self, response: ActiveResponse) -> None:
        """The response's assistant message item opens (with the first thing it says)."""
        rid, iid, index = response.response_id, response.item_id, _message_index(response)
        item = self._in_progress_item(response)
        self._joined(response, item)
        self.emit(ev.ResponseOutputItemAdded(response_id=rid, output_index=index, item=item))
        if response.wants_audio:
            self.emit(
                ev.ResponseContentPartAdded(
                    response_id=rid,
                    item_id=iid,
                    output_index=index,
                    content_index=0,
                    part={"type": "audio", "transcript": ""},
                )
            )

    # ---- function calls ---------------------------------------------------------------

    def function_call_started(self, response: ActiveResponse, call: dict[str, Any]) -> None:
        """A function call item opens (``in_progress``) at its ``output_index``."""
        rid, index = response.response_id, call["output_index"]
        item = function_call_item(call)
        self.emit(ev.ResponseOutputItemAdded(response_id=rid, output_index=index, item=item))
        self._joined(response, item)

    def function_call_delta(
        self, response: ActiveResponse, call: dict[str, Any], delta: str
    ) -> None:
        self.emit(
            ev.ResponseFunctionCallArgumentsDelta(
                response_id=response.response_id,
                item_id=call["id"],
                output_index=call["output_index"],
                call_id=call["call_id"],
                delta=delta,
            )
        )

    def function_call_done(self, response: ActiveResponse, call: dict[str, Any]) -> None:
        """The call item ends: ``completed`` (its arguments are whole) or ``incomplete``."""
        rid, index, item = response.response_id, call["output_index"], function_call_item(call)
        if call["status"] == "completed":
            self.emit(
                ev.ResponseFunctionCallArgumentsDone(
                    response_id=rid,
                    item_id=call["id"],
                    output_index=index,
                    call_id=call["call_id"],
                    name=call["name"],
                    arguments=call["arguments"],
                )
            )
        self.emit(ev.ResponseOutputItemDone(response_id=rid, output_index=index, item=item))
        self._finished_in_conversation(response, item)

    # ---- remote MCP calls (mcp_servers) ------------------------------------------------

    def mcp_item_opened(self, response: ActiveResponse, entry: McpCallEntry) -> None:
        """An ``mcp_call`` (or ``mcp_approval_request``) item opens at its output index."""
        rid, index = response.response_id, entry.output_index
        self.emit(ev.ResponseOutputItemAdded(response_id=rid, output_index=index, item=entry.item))
        self._joined(response, entry.item)

    def mcp_arguments_delta(
        self, response: ActiveResponse, entry: McpCallEntry, delta: str
    ) -> None:
        self.emit(
            ev.ResponseMcpCallArgumentsDelta(
                response_id=response.response_id,
                item_id=entry.item["id"],
                output_index=entry.output_index,
                delta=delta,
            )
        )

    def mcp_arguments_done(self, response: ActiveResponse, entry: McpCallEntry) -> None:
        self.emit(
            ev.ResponseMcpCallArgumentsDone(
                response_id=response.response_id,
                item_id=entry.item["id"],
                output_index=entry.output_index,
                arguments=entry.item["arguments"],
            )
        )

    def mcp_call_running(self, entry: McpCallEntry) -> None:
        self.emit(
            ev.ResponseMcpCallInProgress(item_id=entry.item["id"], output_index=entry.output_index)
        )

    def mcp_item_done(self, response: ActiveResponse, entry: McpCallEntry) -> None:
        """The item ends: a call with its outcome (``completed`` / ``failed`` first), an
        approval request as asked."""
        item_id, index = entry.item["id"], entry.output_index
        if not entry.asks_approval:
            failed = entry.item.get("error") is not None
            done = ev.ResponseMcpCallFailed if failed else ev.ResponseMcpCallCompleted
            self.emit(done(item_id=item_id, output_index=index))
        self.emit(
            ev.ResponseOutputItemDone(
                response_id=response.response_id, output_index=index, item=entry.item
            )
        )
        self._finished_in_conversation(response, entry.item)

    def _joined(self, response: ActiveResponse, item: dict[str, Any]) -> None:
        """A response's output item joins the conversation (not an out-of-band one's)."""
        if response.in_conversation:
            previous = self.session.items.last_item_id
            self.emit(ev.ConversationItemAdded(previous_item_id=previous, item=item))
            self.emit(ev.ConversationItemCreated(previous_item_id=previous, item=item))

    def _finished_in_conversation(self, response: ActiveResponse, item: dict[str, Any]) -> None:
        if response.in_conversation:
            previous = self.session.items.last_item_id
            self.emit(ev.ConversationItemDone(previous_item_id=previous, item=item))

    def speak(self, response: ActiveResponse) -> None:
        self.emit(
            ev.ResponseSpeak(
                response_id=response.response_id,
                item_id=response.item_id,
                output_index=_message_index(response),
                content_index=0,
                metadata={"epoch": self.session.epoch},
            )
        )

    def listen(self, reason: str, response: ActiveResponse | None) -> None:
        self.emit(
            ev.ResponseListen(
                session_id=self.session.session_id,
                response_id=response.response_id if response else None,
                metadata={"reason": reason},
            )
        )

    def audio_delta(
        self,
        response: ActiveResponse,
        b64: str,
        text: str,
        audio_end_ms: int,
        text_chars: int,
    ) -> None:
        response.audio_deltas += 1
        session = self.session
        self.emit(
            ev.ResponseOutputAudioDelta(
                response_id=response.response_id,
                item_id=response.item_id,
                output_index=_message_index(response),
                content_index=0,
                delta=b64,
                format=session.settings.output_format.name,
                sample_rate_hz=session.settings.output_rate_hz,
                metadata={
                    "epoch": session.epoch,
                    "audio_duration_ms": audio_end_ms,
                    "audio_text_marks": [{"text_chars": text_chars, "audio_end_ms": audio_end_ms}],
                },
            )
        )
        self.emit(
            ev.ResponseOutputAudioTranscriptDelta(
                response_id=response.response_id,
                item_id=response.item_id,
                output_index=_message_index(response),
                content_index=0,
                delta=text,
            )
        )

    def transcript_only_delta(self, response: ActiveResponse, text: str) -> None:
        if text:
            self.text_delta(response, text)

    def text_delta(self, response: ActiveResponse, delta: str) -> None:
        index = 1 if response.wants_audio else 0
        if not response.text_part_open:
            response.text_part_open = True
            self.emit(
                ev.ResponseContentPartAdded(
                    response_id=response.response_id,
                    item_id=response.item_id,
                    output_index=_message_index(response),
                    content_index=index,
                    part={"type": "text", "text": ""},
                )
            )
        self.emit(
            ev.ResponseOutputTextDelta(
                response_id=response.response_id,
                item_id=response.item_id,
                output_index=_message_index(response),
                content_index=index,
                delta=delta,
            )
        )

    def output_audio_cleared(self, response_id: str | None) -> None:
        self.emit(ev.OutputAudioBufferCleared(response_id=response_id or ""))

    def output_audio_started(self, response_id: str) -> None:
        self.emit(ev.OutputAudioBufferStarted(response_id=response_id))

    def output_audio_stopped(self, response_id: str) -> None:
        self.emit(ev.OutputAudioBufferStopped(response_id=response_id))

    def response_finished(
        self,
        response: ActiveResponse,
        *,
        status: str,
        reason: str | None,
        transcript: str,
        shown_transcript: str,
        error_message: str | None,
        stage_metrics: dict[str, Any],
    ) -> None:
        rid = response.response_id
        calls = response.calls.values()
        items = [(call["output_index"], function_call_item(call)) for call in calls]
        items += [(entry.output_index, entry.item) for entry in response.mcp_calls.values()]
        if response.message_index is not None:
            message = self._message_done(response, status, transcript, shown_transcript)
            items.append((response.message_index, message))
        output = [item for _, item in sorted(items, key=lambda pair: pair[0])]
        details: dict[str, Any] | None = {"type": status}
        if status == "cancelled":
            # The detailed reason; the codec folds it into OpenAI's two cancel reasons and
            # keeps ours in metadata.omniduplex_reason.
            details["reason"] = reason or "client_cancelled"
        elif status == "failed":
            details["reason"] = reason
            details["error"] = {"type": "server_error", "code": reason, "message": error_message}
        metadata = dict(response.metadata or {})
        metadata["omniduplex_stage_metrics"] = stage_metrics
        obj = self._response_object(
            response,
            status,
            status_details=details,
            output=output,
            metadata=metadata,
            usage=response.usage(),
        )
        self.emit(ev.ResponseDone(response=obj, response_id=rid))
        self.emit(ev.RateLimitsUpdated(rate_limits=[]))

    def _message_done(
        self, response: ActiveResponse, status: str, transcript: str, shown_transcript: str
    ) -> dict[str, Any]:
        """The assistant message's closing events; the item as it ended."""
        rid, iid = response.response_id, response.item_id
        common = {"response_id": rid, "item_id": iid, "output_index": _message_index(response)}
        if response.audio_deltas or transcript:
            self.emit(ev.ResponseOutputAudioDone(content_index=0, **common))
            if transcript:
                self.emit(
                    ev.ResponseOutputAudioTranscriptDone(
                        content_index=0, transcript=shown_transcript, **common
                    )
                )
        if response.wants_audio:
            self.emit(
                ev.ResponseContentPartDone(
                    content_index=0,
                    part={"type": "audio", "transcript": shown_transcript},
                    **common,
                )
            )
        content: list[dict[str, Any]] = []
        if response.wants_audio or transcript:
            content.append({"type": "output_audio", "transcript": shown_transcript})
        if response.text_part_open:
            text = response.text_output()
            index = 1 if response.wants_audio else 0
            self.emit(ev.ResponseOutputTextDone(content_index=index, text=text, **common))
            self.emit(
                ev.ResponseContentPartDone(
                    content_index=index, part={"type": "text", "text": text}, **common
                )
            )
            content.append({"type": "output_text", "text": text})
        item = {
            "id": iid,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": "completed" if status == "completed" else "incomplete",
            "content": content,
        }
        index = _message_index(response)
        self.emit(ev.ResponseOutputItemDone(response_id=rid, output_index=index, item=item))
        self._finished_in_conversation(response, item)
        return item


def _message_index(response: ActiveResponse) -> int:
    return response.message_index if response.message_index is not None else 0
