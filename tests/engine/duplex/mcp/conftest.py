import sys
from pathlib import Path

# tests/mcp_servers.py is shared with the server-level MCP tests; helpers are imported by
# module name from a sys.path entry, as server_harness is.
_TESTS = str(Path(__file__).resolve().parents[3])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
