"""The cluster tests reuse the in-thread server harness of ``tests/entrypoints/openai``."""

from __future__ import annotations

import sys
from pathlib import Path

_HARNESS = Path(__file__).resolve().parents[1] / "openai"
if str(_HARNESS) not in sys.path:
    sys.path.insert(0, str(_HARNESS))
