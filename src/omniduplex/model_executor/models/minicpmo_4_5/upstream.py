"""Where the upstream model comes from: the seam between the stage and the remote code.

``UpstreamDuplexFactory`` hands the stage one ``MiniCPMODuplex`` per conversation (on a
slot) and takes it back when the conversation ends. ``TransformersDuplexFactory`` is the
real one: it loads the checkpoint's remote code with ``transformers``
(``trust_remote_code=True``, local files only) onto CUDA, one loaded model per slot, and
calls upstream's ``MiniCPMO.as_duplex(...)`` for each conversation. Tests point the
deployment's ``upstream_factory`` at a test double of the same surface instead.

Why a model per slot: upstream keeps part of a conversation's streaming state on the
loaded model rather than on the ``MiniCPMODuplex``: ``as_duplex`` sets the model's
processor and unit timings and replaces ``model.tts.audio_tokenizer`` (it calls
``model.init_tts``, which loads token2wav afresh, on every call), and ``prepare`` calls
``model.init_streaming_processor()`` and seeds that token2wav's stream caches, so two
conversations interleaved on one model would overwrite each other's.

The contract was read in a copy of the checkpoint's remote code (chmod777john/MiniCPM-o-Demo
``MiniCPMO45/modeling_minicpmo.py`` @ d5e99a79b69e): ``as_duplex(device=None, **kwargs)``
reads only the keys of ``MiniCPMODuplex._default_duplex_params`` and ignores any other
name without a word, so the stage passes nothing else (the test double enforces it); the
config takes ``init_vision`` / ``init_audio`` / ``init_tts`` (all True by default), which
``from_pretrained`` routes to it.
"""

from __future__ import annotations

import gc
import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .options import MiniCPMO45Options
from .voice import VoiceError, resolve_voice


class MiniCPMOUnavailableError(RuntimeError):
    """The deployment cannot run here; the message names everything that is missing."""


class UpstreamDuplexFactory(ABC):
    """Builds and takes back the upstream ``MiniCPMODuplex`` of each conversation."""

    @abstractmethod
    def open(self, slot: int, settings: Mapping[str, Any]) -> Any:
        """A fresh ``MiniCPMODuplex`` on ``slot`` built with ``settings`` (upstream's
        constructor keywords); ``prepare`` has not been called on it."""

    @abstractmethod
    def release(self, slot: int, duplex: Any) -> None:
        """The conversation on ``slot`` ended (its session stop is already set): free it."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """The stage stops: free everything."""


def load_upstream_factory(options: MiniCPMO45Options) -> UpstreamDuplexFactory:
    """Build ``options.upstream_factory`` (``package.module:Callable``)."""
    module_name, sep, attr = options.upstream_factory.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            "minicpmo option upstream_factory must look like 'package.module:Callable', "
            f"got {options.upstream_factory!r}"
        )
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    factory = target(options, **options.upstream_factory_kwargs)
    if not isinstance(factory, UpstreamDuplexFactory):
        raise TypeError(f"{options.upstream_factory} did not build an UpstreamDuplexFactory")
    return factory


def missing_prerequisites(options: MiniCPMO45Options) -> list[str]:
    """Everything the real model needs here and does not have (empty: all present)."""
    missing: list[str] = []
    if not options.model_dir:
        missing.append(
            "model_dir is not set: point it at a local copy of openbmb/MiniCPM-o-4_5 "
            "(huggingface-cli download openbmb/MiniCPM-o-4_5 --local-dir <dir>), in a copy "
            "of the deploy file (stages[0].model.kwargs.model_dir)"
        )
    else:
        folder = Path(options.model_dir).expanduser()
        if not folder.is_dir():
            missing.append(f"the checkpoint folder model_dir={options.model_dir} does not exist")
        elif not (folder / "config.json").is_file():
            missing.append(f"model_dir={options.model_dir} has no config.json (not a checkpoint)")
    if options.generate_audio:
        try:
            if resolve_voice(options, None) is None:
                missing.append(
                    "no voice: set voice_dir and default_voice to a 16-bit PCM WAV of the "
                    "voice (upstream conditions its speech on it)"
                )
        except VoiceError as exc:
            missing.append(f"default_voice: {exc}")
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        missing.append('torch is not installed (pip install -e ".[minicpmo]")')
    else:
        if options.device.startswith("cuda") and not torch.cuda.is_available():
            missing.append(
                "no CUDA GPU is visible (torch.cuda.is_available() is False): run on a "
                "machine with an NVIDIA GPU and its driver, and check CUDA_VISIBLE_DEVICES"
            )
    try:
        importlib.import_module("transformers")
    except ImportError:
        missing.append('transformers is not installed (pip install -e ".[minicpmo]")')
    return missing


class TransformersDuplexFactory(UpstreamDuplexFactory):
    """The real model: ``slots`` copies of the checkpoint, one conversation on each."""

    def __init__(self, options: MiniCPMO45Options) -> None:
        missing = missing_prerequisites(options)
        if missing:
            raise MiniCPMOUnavailableError("minicpmo-4.5 cannot start: " + "; ".join(missing))
        self.options = options
        self._torch = importlib.import_module("torch")
        transformers = importlib.import_module("transformers")
        dtype = getattr(self._torch, options.dtype)
        self._models: list[Any] = []
        for _ in range(options.slots):
            model = transformers.AutoModel.from_pretrained(
                str(Path(options.model_dir or "").expanduser()),
                trust_remote_code=True,
                local_files_only=True,
                attn_implementation=options.attn_implementation,
                torch_dtype=dtype,
                init_audio=True,
                init_tts=True,
            )
            # No model.init_tts() here: as_duplex calls it (token2wav, with the deployment's
            # enable_float16 / n_timesteps) for every conversation.
            model = model.eval().to(options.device)
            if not callable(getattr(model, "as_duplex", None)):
                raise MiniCPMOUnavailableError(
                    f"minicpmo-4.5 cannot start: the remote code in {options.model_dir} has no "
                    "MiniCPMO.as_duplex (it needs the MiniCPM-o 4.5 checkpoint's own code)"
                )
            self._models.append(model)

    def open(self, slot: int, settings: Mapping[str, Any]) -> Any:
        return self._models[slot].as_duplex(device=self.options.device, **settings)

    def release(self, slot: int, duplex: Any) -> None:
        del duplex  # the conversation's decoder and talker caches go with it
        gc.collect()
        if self._torch.cuda.is_available():
            self._torch.cuda.empty_cache()

    def close(self) -> None:
        self._models.clear()
        gc.collect()
