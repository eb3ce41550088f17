"""espeak-ng in-process through ctypes (the library ships in ``espeakng-loader``).

``libespeak-ng`` keeps global state (one voice, one synth callback), so every call into it
holds one process-wide lock. Synthesis is synchronous: ``espeak_Synth`` calls our callback
on the calling thread with chunks of 16-bit PCM at 22.05 kHz, first one within a
millisecond; the callback returning 1 stops synthesis at once (barge-in).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from .voice import SpeechVoice, SpeechVoiceError

ESPEAK_RATE_HZ = 22_050
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_ESPEAK_CHARS_UTF8 = 1
_ESPEAK_RATE = 1
_ESPEAK_PITCH = 3
_EE_OK = 0
# Milliseconds of audio per callback: small chunks make aborts prompt.
_BUFFER_MS = 40

_SYNTH_CALLBACK = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)

# The library is process-global; so are these.
_LOCK = threading.RLock()
_lib: ctypes.CDLL | None = None
_rate_hz = 0
_chunk_sink: Callable[[np.ndarray], bool] | None = None
_voice: tuple[str, int, int] | None = None


class EspeakError(SpeechVoiceError):
    """espeak-ng could not be loaded or refused a call."""


def _on_synth(wav: ctypes.POINTER(ctypes.c_short), count: int, _events: int) -> int:  # type: ignore[valid-type]
    sink = _chunk_sink
    if sink is None:
        return 1
    if not wav or count <= 0:
        return 0  # end of synthesis (wav is NULL) or an event-only call
    samples = np.ctypeslib.as_array(wav, shape=(count,)).astype(np.float32) / 32768.0
    return 0 if sink(samples) else 1


_CALLBACK = _SYNTH_CALLBACK(_on_synth)  # kept alive for the process lifetime


def _library() -> ctypes.CDLL:
    """Load and initialise libespeak-ng once (caller holds ``_LOCK``)."""
    global _lib, _rate_hz
    if _lib is not None:
        return _lib
    try:
        import espeakng_loader
    except ImportError as exc:  # pragma: no cover - a dependency of omniduplex
        raise EspeakError("espeak TTS needs `pip install omniduplex[cascade]`") from exc
    lib = ctypes.CDLL(espeakng_loader.get_library_path())
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_SetSynthCallback.argtypes = [_SYNTH_CALLBACK]
    lib.espeak_SetSynthCallback.restype = None
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetVoiceByName.restype = ctypes.c_int
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_SetParameter.restype = ctypes.c_int
    lib.espeak_Synth.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_uint,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    lib.espeak_Synth.restype = ctypes.c_int
    rate = lib.espeak_Initialize(
        _AUDIO_OUTPUT_SYNCHRONOUS, _BUFFER_MS, espeakng_loader.get_data_path().encode(), 0
    )
    if rate <= 0:
        raise EspeakError(f"espeak_Initialize failed ({rate})")
    lib.espeak_SetSynthCallback(_CALLBACK)
    _lib, _rate_hz = lib, rate
    return lib


def espeak_rate_hz() -> int:
    with _LOCK:
        _library()
        return _rate_hz


class EspeakVoice(SpeechVoice):
    """One voice setting; ``synthesize`` is safe from any thread (calls are serialised)."""

    def __init__(self, voice: str = "en-us", *, rate_wpm: int = 175, pitch: int = 50) -> None:
        self.voice = voice
        self.rate_wpm = int(rate_wpm)
        self.pitch = int(pitch)
        with _LOCK:
            _library()
            self._apply()

    @property
    def sample_rate_hz(self) -> int:
        return _rate_hz

    def _apply(self) -> None:
        global _voice
        wanted = (self.voice, self.rate_wpm, self.pitch)
        if _voice == wanted:
            return
        lib = _library()
        if lib.espeak_SetVoiceByName(self.voice.encode()) != _EE_OK:
            raise EspeakError(f"unknown espeak voice {self.voice!r}")
        lib.espeak_SetParameter(_ESPEAK_RATE, self.rate_wpm, 0)
        lib.espeak_SetParameter(_ESPEAK_PITCH, self.pitch, 0)
        _voice = wanted

    def stream(self, text: str, on_chunk: Callable[[np.ndarray], bool]) -> bool:
        """Synthesize ``text``, handing float32 chunks to ``on_chunk`` as they come.

        ``on_chunk`` returns False to abort; the result is False when synthesis was
        aborted, True when it ran to the end.
        """
        global _chunk_sink
        aborted = False

        def sink(samples: np.ndarray) -> bool:
            nonlocal aborted
            if not on_chunk(samples):
                aborted = True
            return not aborted

        data = text.encode("utf-8") + b"\0"
        with _LOCK:
            lib = _library()
            self._apply()
            _chunk_sink = sink
            try:
                err = lib.espeak_Synth(
                    data, len(data), 0, _POS_CHARACTER, 0, _ESPEAK_CHARS_UTF8, None, None
                )
            finally:
                _chunk_sink = None
        if err != _EE_OK and not aborted:
            raise EspeakError(f"espeak_Synth failed ({err})")
        return not aborted

    def synthesize(
        self, text: str, *, should_stop: Callable[[], bool] | None = None
    ) -> npt.NDArray[np.float32]:
        """The whole utterance as float32 at ``sample_rate_hz`` (cut short if stopped)."""
        chunks: list[np.ndarray] = []

        def keep(samples: np.ndarray) -> bool:
            chunks.append(samples)
            return not (should_stop is not None and should_stop())

        self.stream(text, keep)
        if not chunks:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(chunks).astype(np.float32, copy=False)
