"""Smart Turn v3.2: does the user's turn sound finished? (``semantic_vad`` in the cascade).

The model (8.7 MB ONNX, BSD-2-Clause, by Daily) ships inside the ``pipecat-ai`` wheel; we
read the file from that distribution's install location and never import pipecat itself
(its import pulls in loguru, numba and more). It runs on ``onnxruntime``.

Input: the last 8 s of the turn at 16 kHz (shorter turns are padded with leading
silence), as Whisper's 80-bin log-mel spectrogram, 100 frames per second. Output: the
probability that the turn is complete. Inference is stateless, so one instance serves
every session (onnxruntime sessions may be run from several threads at once).
"""

from __future__ import annotations

import os
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, Final

import numpy as np
import soxr

from omniduplex.engine.duplex.vad import TurnCompletionModel

MODEL_RATE_HZ: Final = 16_000
WINDOW_S: Final = 8
WINDOW_SAMPLES: Final = MODEL_RATE_HZ * WINDOW_S
SMART_TURN_NAME: Final = "smart-turn-v3.2"
_DISTRIBUTION: Final = "pipecat-ai"
_WEIGHTS_IN_WHEEL: Final = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
# Points at another copy of the ONNX file (e.g. a newer Smart Turn of the same interface).
WEIGHTS_ENV: Final = "OMNIDUPLEX_SMART_TURN_ONNX"

# Whisper's front end: 25 ms windows every 10 ms, 80 Slaney mel bands up to Nyquist.
_N_FFT: Final = 400
_HOP: Final = 160
_N_MELS: Final = 80
_LOG_FLOOR: Final = 1e-10
_DYNAMIC_RANGE_LOG10: Final = 8.0


def smart_turn_weights() -> Path | None:
    """Where the Smart Turn ONNX file is, or ``None`` when it is not installed."""
    override = os.environ.get(WEIGHTS_ENV)
    if override:
        path = Path(override)
        return path if path.is_file() else None
    try:
        dist = metadata.distribution(_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(_WEIGHTS_IN_WHEEL)))
    return path if path.is_file() else None


def smart_turn_available() -> bool:
    """Both the weights and onnxruntime are installed (``semantic_vad`` is served)."""
    if smart_turn_weights() is None:
        return False
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _slaney_mel(hz: np.ndarray) -> np.ndarray:
    # Linear below 1 kHz (3 mels per 200 Hz), logarithmic above: librosa's "slaney" scale.
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz * 3.0 / 200.0
    log_part = 15.0 + np.log(np.maximum(hz, 1e-12) / 1000.0) * (27.0 / np.log(6.4))
    return np.where(hz >= 1000.0, log_part, linear)


def _slaney_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    linear = mel * 200.0 / 3.0
    log_part = 1000.0 * np.exp((mel - 15.0) * (np.log(6.4) / 27.0))
    return np.where(mel >= 15.0, log_part, linear)


@cache
def _mel_filters() -> np.ndarray:
    """``(n_mels, n_fft // 2 + 1)`` triangular filters, each scaled to unit area."""
    bins = np.linspace(0.0, MODEL_RATE_HZ / 2, _N_FFT // 2 + 1)
    edges = _slaney_hz(np.linspace(0.0, _slaney_mel(np.array(MODEL_RATE_HZ / 2)), _N_MELS + 2))
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - lower) / (centre - lower)
    falling = (upper - bins[None, :]) / (upper - centre)
    triangles = np.clip(np.minimum(rising, falling), 0.0, None)
    return triangles * (2.0 / (upper - lower))


@cache
def _window() -> np.ndarray:
    # Periodic Hann (torch.hann_window's default), as Whisper's STFT uses.
    n = np.arange(_N_FFT)
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * n / _N_FFT)


def whisper_log_mel(audio: np.ndarray) -> np.ndarray:
    """Whisper's normalised log-mel features of exactly 8 s of 16 kHz audio: (80, 800).

    The waveform is first scaled to zero mean and unit variance (the Whisper feature
    extractor's ``do_normalize``, which Smart Turn was trained with).
    """
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    if x.size != WINDOW_SAMPLES:
        raise ValueError(f"expected {WINDOW_SAMPLES} samples, got {x.size}")
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    half = _N_FFT // 2
    padded = np.pad(x.astype(np.float64), half, mode="reflect")
    frames = 1 + (padded.size - _N_FFT) // _HOP
    strided = np.lib.stride_tricks.as_strided(
        padded,
        shape=(frames, _N_FFT),
        strides=(padded.strides[0] * _HOP, padded.strides[0]),
        writeable=False,
    )
    power = np.abs(np.fft.rfft(strided * _window(), axis=1)) ** 2
    mel = np.log10(np.maximum(power @ _mel_filters().T, _LOG_FLOOR)).T
    # Whisper drops the last STFT frame (801 -> 800 frames for 8 s).
    mel = mel[:, :-1]
    mel = np.maximum(mel, mel.max() - _DYNAMIC_RANGE_LOG10)
    return ((mel + 4.0) / 4.0).astype(np.float32)


def fit_window(audio: np.ndarray) -> np.ndarray:
    """The last 8 s of ``audio``, padded in front with silence when shorter."""
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    if x.size >= WINDOW_SAMPLES:
        return x[-WINDOW_SAMPLES:]
    return np.concatenate((np.zeros(WINDOW_SAMPLES - x.size, dtype=np.float32), x))


class SmartTurnModel(TurnCompletionModel):
    """Smart Turn v3.2 on onnxruntime: ``completion_probability`` of a turn's audio."""

    name = SMART_TURN_NAME
    sample_rate_hz = MODEL_RATE_HZ
    max_audio_ms = WINDOW_S * 1000

    def __init__(self, weights: Path | str | None = None, *, threads: int = 1) -> None:
        try:
            import onnxruntime as ort
        except ImportError as exc:  # pragma: no cover - onnxruntime is a dependency
            raise RuntimeError("Smart Turn needs onnxruntime") from exc
        path = Path(weights) if weights is not None else smart_turn_weights()
        if path is None or not path.is_file():
            raise RuntimeError(
                f"Smart Turn weights not found (install pipecat-ai or set {WEIGHTS_ENV})"
            )
        options = ort.SessionOptions()
        # One decision at a time per call; several sessions may call at once, so keep each
        # call on one core instead of letting every call grab them all.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session: Any = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._input = self._session.get_inputs()[0].name
        self.weights = path

    def completion_probability(self, audio: np.ndarray, rate_hz: int) -> float:
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        if rate_hz != MODEL_RATE_HZ:
            samples = np.asarray(soxr.resample(samples, rate_hz, MODEL_RATE_HZ), dtype=np.float32)
        features = whisper_log_mel(fit_window(samples))[None, :, :]
        (probability,) = self._session.run(None, {self._input: features})[0].reshape(-1)[:1]
        return float(probability)
