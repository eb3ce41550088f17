"""Where a streamed reply is cut into pieces to speak: whole sentences, and a first phrase.

The TTS stage voices a reply sentence by sentence as its text streams in
(``split_sentences``); a reply's first words may go a phrase early (``first_phrase_end``),
so the voice starts before the model has written the rest, and the local language model
hands out its text where the TTS stage will cut it.
"""

from __future__ import annotations

import re

# A sentence ends at . ! ? ; : followed by a space, or at a line break.
_BOUNDARY = re.compile(r"(?<=[.!?;:])\s+|\n+")
_WORD = re.compile(r"\S+")
FIRST_PHRASE_WORDS = 4
# Words that open a clause: a reply's first words may be voiced before one of them
# ("The sky is blue | because ..."), a pause a speaker would make there too; and after
# three words, before a preposition ("The moon is | about 180 miles away"): a shorter
# first phrase is written and synthesised sooner, and the rest is ready before it ends.
PHRASE_OPENER = re.compile(
    r"[\"'(]*(and|but|or|so|because|since|although|though|while|when|where|which|who|whose"
    r"|if|unless|until|with)",
    re.IGNORECASE,
)
FIRST_PHRASE_PREPOSITION_WORDS = 3
PREPOSITION = re.compile(
    r"[\"'(]*(by|from|in|on|at|for|to|into|about|after|before|during|without)", re.IGNORECASE
)
# Without punctuation, speak what we have once it is this long (at a space).
_MAX_SENTENCE_CHARS = 160


def first_phrase_end(text: str) -> int:
    """Where a reply's first phrase ends in ``text`` (0: not yet): after a comma, or before
    a whole ``PHRASE_OPENER`` word, with at least ``FIRST_PHRASE_WORDS`` words before; or
    before a ``PREPOSITION`` with ``FIRST_PHRASE_PREPOSITION_WORDS`` before."""
    words = list(_WORD.finditer(text))
    for index, word in enumerate(words):
        complete = word.end() < len(text)  # a space follows: the word is written out
        if not complete:
            break
        opener = PHRASE_OPENER.fullmatch(word.group()) is not None
        if index >= FIRST_PHRASE_WORDS and opener:
            return word.start()
        if index >= FIRST_PHRASE_PREPOSITION_WORDS and PREPOSITION.fullmatch(word.group()):
            return word.start()
        if index + 1 >= FIRST_PHRASE_WORDS and word.group().endswith(","):
            return word.end()
    return 0


def split_sentences(
    buffer: str, *, final: bool, first_phrase: bool = False
) -> tuple[list[str], str]:
    """Complete sentences in ``buffer`` and the unfinished rest (all of it when final).

    With ``first_phrase`` (nothing of the reply said yet) a first sentence not written to
    its end yet may be voiced a phrase early (``first_phrase_end``): the voice starts
    before the model has written the rest.
    """
    sentences: list[str] = []
    rest = buffer
    if first_phrase and _BOUNDARY.search(rest) is None:
        end = first_phrase_end(rest)
        if end:
            sentences.append(rest[:end].strip())
            rest = rest[end:].lstrip()
    while True:
        match = _BOUNDARY.search(rest)
        if match is None:
            break
        sentence, rest = rest[: match.start()], rest[match.end() :]
        if sentence.strip():
            sentences.append(sentence.strip())
    while len(rest) > _MAX_SENTENCE_CHARS:
        cut = rest.rfind(" ", 0, _MAX_SENTENCE_CHARS)
        cut = cut if cut > 0 else _MAX_SENTENCE_CHARS
        sentences.append(rest[:cut].strip())
        rest = rest[cut:].lstrip()
    if final and rest.strip():
        sentences.append(rest.strip())
        rest = ""
    return sentences, rest
