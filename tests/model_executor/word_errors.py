"""Word errors between what was said and what a recogniser heard, for tests that check a
transcript with room (key words and a bound) rather than letter for letter: what a
recogniser hears of synthesized speech may move with its version and the CPU."""

from __future__ import annotations


def word_errors(reference: str, heard: str) -> int:
    """Levenshtein distance over words (substitutions, insertions, deletions)."""
    ref, hyp = reference.split(), heard.split()
    row = list(range(len(hyp) + 1))
    for i, word in enumerate(ref, 1):
        diagonal, row[0] = row[0], i
        for j, other in enumerate(hyp, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (word != other))
    return row[len(hyp)]


def heard_as(heard: str, sentence: str, key_words: set[str]) -> bool:
    """``heard`` holds ``key_words`` and is at most a quarter of ``sentence``'s words off."""
    return key_words <= set(heard.split()) and (
        word_errors(sentence, heard) <= len(sentence.split()) // 4
    )
