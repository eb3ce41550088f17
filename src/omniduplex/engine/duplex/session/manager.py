"""All sessions of one engine: admission, dispatch, backpressure, lease reaper, close.

Runs on the orchestrator loop. The manager reads sessions but never writes one: a
command's backpressure reservation, lease activity and resume go through the session's
runner, its only writer. The manager owns the server-wide input audio budget
(``max_buffered_input_s``); each runner keeps its own session's share of it
(``input_budget.py``). A session that is closing keeps its admission slot until
its stage cleanup has finished; a failed cleanup keeps the slot and is retried by the
reaper. Conversations and transcription sessions are admitted apart, each kind up to its
own limit (``max_sessions``, ``max_transcription_sessions``). ``session.closed`` /
``session.expired`` is always the session's last event and is emitted after the cleanup
attempt, also when it failed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ....protocol.duplex import (
    SESSION_TYPE,
    TRANSCRIPTION_SESSION_TYPE,
    RealtimeProtocolError,
    is_transcription,
)
from ....protocol.duplex import commands as cmd
from ....protocol.duplex import events as ev
from ..contracts import SessionStages
from ..errors import DuplexSessionError
from ..mcp.config import McpConfig
from ..mcp.policy import McpUrlPolicy
from ..plugin import DuplexModelPlugin, DuplexRuntimeConfigError
from ..runtime_config import DuplexSessionRuntimeConfig
from ..settings import SessionSettings
from .context import AdmissionLimits, StageOutputItem
from .input_budget import InputAudioBudget
from .lease import DuplexLeaseState, LeaseActivity, LeaseConfig, LeaseGenerationMismatch
from .runner import DuplexSessionRunner
from .state import DuplexEngineSession

log = logging.getLogger(__name__)

EventSink = Callable[[str, Any], None]


@dataclass(frozen=True, slots=True)
class OpenResult:
    session_id: str
    lease_generation: int
    public_session: dict[str, Any]
    capabilities: dict[str, Any]


@dataclass(slots=True)
class _PendingCleanup:
    session_id: str
    request_ids: list[str]
    reason: str
    attempts: int = 0
    tried: set[str] = field(default_factory=set)
    stopping: bool = False  # its runner is still stopping: not the reaper's yet


class DuplexSessionManager:
    def __init__(
        self,
        *,
        plugin: DuplexModelPlugin,
        session_stages: SessionStages,
        runtime: DuplexSessionRuntimeConfig,
        sink: EventSink,
        clock: Callable[[], float],
        served_model: str = "omniduplex",
        mcp: McpConfig | None = None,
    ) -> None:
        self.plugin = plugin
        # The deployment's rules for remote MCP servers, one policy for every session.
        self.mcp = mcp or McpConfig()
        self.mcp_policy = McpUrlPolicy(self.mcp.allowed_urls)
        self.session_stages = session_stages
        self.runtime = runtime
        self.clock = clock
        self.served_model = served_model
        self._sink = sink
        self.runners: dict[str, DuplexSessionRunner] = {}
        self._closing: dict[str, _PendingCleanup] = {}
        self._admitting: set[str] = set()
        self._abandoned: set[str] = set()
        # The kind (``session.type``) of every session holding a slot, for its own limit.
        self._kinds: dict[str, str] = {}
        self._executor = ThreadPoolExecutor(
            max_workers=runtime.offload_workers, thread_name_prefix="duplex-session"
        )
        self.capabilities = plugin.capabilities(max_sessions=runtime.max_sessions)
        self.input_audio_budget = InputAudioBudget(
            runtime.max_buffered_input_s, plugin.input_sample_rate_hz
        )

    # ---- admission -------------------------------------------------------------------

    @property
    def admitted(self) -> int:
        return len(self._holding())

    def admitted_of(self, kind: str) -> int:
        """Sessions of ``kind`` (``realtime`` or ``transcription``) holding a slot."""
        return sum(1 for sid in self._holding() if self._kinds.get(sid) == kind)

    def _holding(self) -> set[str]:
        return self.runners.keys() | self._closing.keys() | self._admitting

    def _limit_of(self, kind: str) -> int:
        if kind == TRANSCRIPTION_SESSION_TYPE:
            return self.runtime.max_transcription_sessions
        return self.runtime.max_sessions

    async def open(self, session_id: str, payload: Mapping[str, Any]) -> OpenResult:
        if (
            session_id in self.runners
            or session_id in self._closing
            or session_id in self._admitting
        ):
            raise DuplexSessionError(
                f"Duplex session already exists: {session_id}", code="session_exists"
            )
        kind = TRANSCRIPTION_SESSION_TYPE if is_transcription(payload) else SESSION_TYPE
        holding = self._holding()
        self._kinds = {sid: k for sid, k in self._kinds.items() if sid in holding}
        limit = self._limit_of(kind)
        if self.admitted_of(kind) >= limit:
            await self._evict_for(session_id, kind)
        if self.admitted_of(kind) >= limit:
            what = (
                "transcription_session" if kind == TRANSCRIPTION_SESSION_TYPE else "duplex_session"
            )
            raise DuplexSessionError(
                f"{what}_capacity_exhausted: limit={limit}",
                code="resource_exhausted",
                retryable=True,
            )
        self._admitting.add(session_id)
        self._kinds[session_id] = kind
        try:
            if kind == TRANSCRIPTION_SESSION_TYPE:
                self._check_transcriber()
            # The model's defaults first (e.g. server VAD for a VAD-driven cascade), then
            # whatever the client sent on top.
            settings = SessionSettings.from_realtime(
                self.plugin.default_session(),
                served_model=self.served_model,
                max_idle_timeout_s=self.runtime.max_idle_timeout_s,
                output_audio_pacing=self.runtime.output_audio_pacing,
                output_audio_lead_ms=self.runtime.output_audio_lead_ms,
                output_audio_lead=self.runtime.output_audio_lead,
            ).updated(payload, opening=True, max_idle_timeout_s=self.runtime.max_idle_timeout_s)
            model_config = settings.as_model_config()
            # Plugin hooks may block (loading a voice prompt): keep them off the loop.
            await self._offload(self.plugin.validate_session_config, model_config)
            model_state = await self._offload(self.plugin.create_session_state, model_config)
            idle_ttl = min(
                settings.idle_timeout_s
                or self.runtime.idle_ttl_s
                or self.runtime.max_idle_timeout_s,
                self.runtime.max_idle_timeout_s,
            )
            lease = DuplexLeaseState(
                LeaseConfig(
                    idle_ttl_s=idle_ttl,
                    disconnect_grace_s=self.runtime.disconnect_grace_s,
                    max_idle_ttl_s=self.runtime.max_idle_timeout_s,
                ),
                last_activity=self.clock(),
            )
            session = DuplexEngineSession(
                session_id=session_id,
                settings=settings,
                capabilities=self.capabilities,
                lease=lease,
                model_state=model_state,
            )
            runner = DuplexSessionRunner(
                session,
                plugin=self.plugin,
                session_stages=self.session_stages,
                sink=lambda event, sid=session_id: self._sink(sid, event),
                offload=self._offload,
                clock=self.clock,
                limits=AdmissionLimits(
                    max_pending_input_bytes=self.runtime.max_pending_input_bytes_per_session,
                    max_pending_turns=self.runtime.max_pending_turns_per_session,
                ),
                max_input_turn_s=self.runtime.max_input_turn_s,
                input_audio_budget=self.input_audio_budget,
                max_unplayed_output_bytes=self.runtime.max_unplayed_output_bytes_per_session,
                mcp_config=self.mcp,
                mcp_policy=self.mcp_policy,
            )
            if session_id in self._abandoned:
                raise asyncio.CancelledError
            self.runners[session_id] = runner
            runner.start()
            return OpenResult(
                session_id=session_id,
                lease_generation=lease.generation,
                public_session=settings.public_object(session),
                capabilities=self.capabilities.as_dict(),
            )
        except (DuplexRuntimeConfigError, RealtimeProtocolError) as exc:
            # A setting the client sent: its own code and field, as on session.update.
            raise DuplexSessionError(str(exc), code=exc.code, param=exc.param) from exc
        except (ValueError, TypeError) as exc:
            code = getattr(exc, "code", "invalid_session_config")
            raise DuplexSessionError(str(exc), code=code) from exc
        finally:
            # A cancelled open (the client went away) releases its slot here.
            self._admitting.discard(session_id)
            self._abandoned.discard(session_id)

    def _check_transcriber(self) -> None:
        """A transcription session needs a model that transcribes its input by itself
        (turn-based, with an ASR stage): else it is refused at open."""
        if self.plugin.streams_input or not self.capabilities.supports_input_transcription:
            raise DuplexSessionError(
                f"{self.served_model} has no transcriber: transcription sessions are not "
                "served by this deployment (serve a cascade for them)",
                code="transcription_unsupported",
                param="type",
            )

    async def _evict_for(self, session_id: str, kind: str) -> None:
        """Full: under ``when_full: evict_detached`` the longest-detached session of the
        same kind makes way for ``session_id`` (``runtime_config.py``)."""
        if self.runtime.when_full != "evict_detached":
            return
        detached = [
            (runner.session.lease.detached_at, sid)
            for sid, runner in self.runners.items()
            if runner.session.lease.detached_at is not None
            and not runner.closing
            and self._kinds.get(sid) == kind
        ]
        if detached:
            _, oldest = min(detached)
            log.info("session %s: evicted (detached) to admit %s", oldest, session_id)
            await self.close(oldest, "evicted_for_new_session", expired=True)

    def abandon_open(self, session_id: str) -> None:
        if session_id in self._admitting:
            self._abandoned.add(session_id)

    async def _offload(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # ---- commands ------------------------------------------------------------------

    def dispatch(self, session_id: str, command: Any) -> None:
        runner = self.runners.get(session_id)
        event_id = getattr(command, "event_id", None)
        if runner is None:
            error = ev.ErrorEvent.build(
                "unknown_session" if session_id not in self._closing else "session_closed",
                f"Unknown or closed duplex session: {session_id}",
                event_id=event_id,
            )
            error.session_id = session_id
            self._sink(session_id, error)
            return
        if runner.closing:
            runner.out.error(
                "session_closed", f"Duplex session is closing: {session_id}", event_id=event_id
            )
            return
        if isinstance(command, cmd.CloseSession):
            self._spawn_close(session_id, command.reason or "client_close")
            return
        if isinstance(command, cmd.AppendAudio) and not self.capabilities.accepts_input_modality(
            "audio"
        ):
            runner.out.error(
                "invalid_input_modality", "this model does not accept audio", event_id=event_id
            )
            return
        if (
            isinstance(command, cmd.AppendAudio)
            and command.video_frames
            and not (
                self.capabilities.accepts_input_modality("video")
                and self.capabilities.supports_image_input
            )
        ):
            # Refused whole rather than dropping the frames unseen: the client learns at
            # once that this model cannot see them.
            runner.out.error(
                "invalid_input_modality",
                "this model does not accept video_frames; send audio only",
                event_id=event_id,
            )
            return
        # The runner reserves the command's admission (the only writer of its session);
        # the reservation is released on every path the command takes there.
        if runner.admit(command):
            runner.submit(command)

    def on_stage_output(self, session_id: str, item: StageOutputItem) -> None:
        runner = self.runners.get(session_id)
        if runner is not None:
            runner.submit(item)

    # ---- lease control -----------------------------------------------------------------

    def _require(self, session_id: str) -> DuplexSessionRunner:
        runner = self.runners.get(session_id)
        if runner is None:
            raise DuplexSessionError(
                f"Unknown or closed duplex session: {session_id}", code="unknown_session"
            )
        if runner.closing:
            raise DuplexSessionError(
                f"Duplex session is closing: {session_id}", code="session_closed"
            )
        return runner

    def touch(
        self, session_id: str, activity: LeaseActivity, *, expected_generation: int | None = None
    ) -> int:
        runner = self._require(session_id)
        try:
            return runner.touch(activity, expected_generation=expected_generation)
        except LeaseGenerationMismatch as exc:
            raise _resumed_elsewhere(session_id) from exc

    def resume(self, session_id: str, expected_generation: int) -> OpenResult:
        runner = self._require(session_id)
        try:
            generation = runner.resume(expected_generation)
        except LeaseGenerationMismatch as exc:
            raise _resumed_elsewhere(session_id) from exc
        session = runner.session
        return OpenResult(
            session_id,
            generation,
            session.settings.public_object(session),
            self.capabilities.as_dict(),
        )

    # ---- close and expiry ------------------------------------------------------------

    def _spawn_close(self, session_id: str, reason: str, *, expired: bool = False) -> None:
        asyncio.get_running_loop().create_task(self.close(session_id, reason, expired=expired))

    async def close(
        self, session_id: str, reason: str = "client_close", *, expired: bool = False
    ) -> bool:
        runner = self.runners.pop(session_id, None)
        if runner is None:
            self.abandon_open(session_id)
            return False
        session = runner.session
        # The slot stays taken until cleanup is done, from the moment the runner leaves
        # the running set (its stop may wait on the runner's task).
        pending = _PendingCleanup(session_id, [], reason, stopping=True)
        self._closing[session_id] = pending
        request_ids: list[str] = []
        try:
            request_ids = await runner.stop(reason)
        finally:
            pending.request_ids = sorted(set(request_ids) | session.request_ids)
            pending.stopping = False
        try:
            await self.session_stages.cleanup(pending.request_ids)
        except Exception:
            log.exception("session %s: stage cleanup failed; the reaper retries", session_id)
        else:
            self._closing.pop(session_id, None)
        finally:
            runner.emit_terminal(reason, expired=expired)
        return True

    async def reap_expired(self, now: float | None = None) -> int:
        now = self.clock() if now is None else now
        done = 0
        for session_id, pending in list(self._closing.items()):
            if session_id in self.runners or pending.stopping:
                continue
            try:
                await self.session_stages.cleanup(pending.request_ids)
            except Exception:
                pending.attempts += 1
                continue
            self._closing.pop(session_id, None)
            done += 1
        for session_id, runner in list(self.runners.items()):
            lease = runner.session.lease
            if lease.disconnect_grace_expired(now):
                await self.close(session_id, "disconnect_grace_expired", expired=True)
                done += 1
            elif lease.idle_expired(now):
                await self.close(session_id, "idle_ttl_expired", expired=True)
                done += 1
        return done

    async def reaper_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.runtime.reaper_interval_s)
            except TimeoutError:
                try:
                    await self.reap_expired()
                except Exception:
                    log.exception("duplex reaper tick failed")

    async def close_sessions_of_requests(self, request_ids: set[str], reason: str) -> None:
        """A stage worker died: end the sessions whose requests it held."""
        for session_id, runner in list(self.runners.items()):
            if runner.session.request_ids & request_ids:
                runner.out.error(
                    "stage_worker_died", f"model stage stopped: {reason}", retryable=False
                )
                await self.close(session_id, "stage_worker_died")

    async def close_all_failed(self, code: str, message: str) -> None:
        """The engine can serve nothing more: every session gets a ``code`` error saying
        why, then closes with ``code`` as its reason."""
        for session_id, runner in list(self.runners.items()):
            if self.runners.get(session_id) is not runner:
                continue  # closed meanwhile (a close awaits), with its own reason
            runner.out.error(code, message, retryable=False)
            await self.close(session_id, code)

    async def shutdown(self, reason: str = "shutdown") -> None:
        for session_id in list(self.runners):
            await self.close(session_id, reason)
        self._executor.shutdown(wait=False, cancel_futures=True)


def _resumed_elsewhere(session_id: str) -> DuplexSessionError:
    """A lease moved on under a resume: another connection resumed the session first (the
    lease generations are internal; the client is told what happened)."""
    return DuplexSessionError(
        f"session {session_id} was resumed by another connection first",
        code="session_resume_conflict",
    )
