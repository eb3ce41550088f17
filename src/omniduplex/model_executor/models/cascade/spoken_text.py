"""A language model's reply made fit to be spoken: markdown and emoji taken out.

Chat models write for screens (``**bold**``, ``# headings``, ``- lists``, emoji); a voice
would read the marks out or stumble on them. ``SpokenText`` filters a reply as it streams:
marks go, list markers at the start of a line go (the line stays, and the TTS stage
still ends a sentence there), everything else passes unchanged and at once, except the
few characters at a line's start that might yet turn out to be a list marker.
"""

from __future__ import annotations

import re

_MARKS = re.compile(r"[*#`~]|[\U0001F000-\U0001FAFF\u2600-\u27BF\uFE0F\u200D]")
# A list marker: "- ", "• ", "* ", "+ ", "1. ", "2) " at the start of a line.
_MARKER = re.compile(r"[ \t]*(?:[-•*+]|\d{1,2}[.)])[ \t]+")
_BARE_MARKER = re.compile(r"[ \t]*(?:[-•*+]|\d{1,2}[.)])?[ \t]*")
# What a line may start with and still become a marker once more text comes.
_MARKER_SO_FAR = re.compile(r"[ \t]*(?:[-•*+]|\d{1,2}[.)]?)?[ \t]*")


class SpokenText:
    """One reply's filter: ``feed`` each piece, then ``feed("", final=True)``."""

    def __init__(self) -> None:
        self._pending = ""
        self._line_start = True

    def feed(self, piece: str, *, final: bool = False) -> str:
        out: list[str] = []
        self._pending += piece
        while self._pending:
            if self._line_start:
                marker = _MARKER.match(self._pending)
                if marker is not None and marker.end() < len(self._pending):
                    self._pending = self._pending[marker.end() :]
                    self._line_start = False
                    continue
                if not final and _MARKER_SO_FAR.fullmatch(self._pending):
                    break  # wait: this may still be a marker
                if final and _BARE_MARKER.fullmatch(self._pending):
                    self._pending = ""  # a marker with nothing after it says nothing
                    break
                self._line_start = False
            newline = self._pending.find("\n")
            if newline < 0:
                out.append(self._pending)
                self._pending = ""
            else:
                out.append(self._pending[: newline + 1])
                self._pending = self._pending[newline + 1 :]
                self._line_start = True
        return _MARKS.sub("", "".join(out))
