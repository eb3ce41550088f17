"""``omniduplex`` command line.

``deployments`` lists the shipped deploy files. ``serve`` answers with a clear message and
exit status 2 until the serving layer is part of the package.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

DEPLOY_DIR = Path(__file__).resolve().parent.parent / "deploy"


def _deployments() -> list[str]:
    return sorted(path.stem for path in DEPLOY_DIR.glob("*.yaml"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="omniduplex", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("deployments", help="list the shipped deployments")
    serve = commands.add_parser("serve", help="serve a deployment over the Realtime API")
    serve.add_argument("deployment", nargs="?", default=None)
    args = parser.parse_args(argv)
    if args.command == "deployments":
        print("\n".join(_deployments()))
        return 0
    print(
        "omniduplex serve: the WebSocket serving layer is not in this build yet; "
        "use the in-process API (omniduplex.protocol, omniduplex.entrypoints) meanwhile.",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
