import sys
from pathlib import Path

# The test stage models are built from "stage_models:Class" factory paths, also inside
# spawned stage processes, which inherit sys.path from this process.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
