"""examples/inline_duplex.py runs to completion."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inline_duplex.py"


def test_example_runs_a_barge_in_conversation() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "turn 1: sent 1500 ms; cancelled" in out
    assert "turn 2: completed" in out
    assert "<- session.closed" in out
    assert "errors: 0, closed: True" in out
