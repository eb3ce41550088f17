"""``omniduplex`` command line: ``serve`` a deployment, list ``deployments``."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

DEPLOY_DIR = Path(__file__).resolve().parent.parent / "deploy"
DEFAULT_DEPLOYMENT = "cascade"


def _deployments() -> list[str]:
    return sorted(path.stem for path in DEPLOY_DIR.glob("*.yaml"))


def _graceful_server_class() -> type:
    import uvicorn

    class GracefulServer(uvicorn.Server):
        """On SIGTERM, sessions get ``session.closed`` (reason ``shutdown``) before uvicorn
        drops the sockets."""

        async def shutdown(self, sockets=None) -> None:
            app = self.config.app
            handler = getattr(getattr(app, "state", None), "handlers", {}).get("handler")
            if handler is not None:
                await handler.shutdown()
            await super().shutdown(sockets)

    return GracefulServer


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from ..config.pipeline import load_deploy_config
    from .duplex_omni import DuplexOmni
    from .openai.api_server import build_app

    try:
        pipeline = load_deploy_config(args.deployment or DEFAULT_DEPLOYMENT)
    except (OSError, ValueError) as exc:
        print(f"omniduplex serve: {exc}", file=sys.stderr)
        return 2
    if pipeline.session_mode != "duplex":
        print("omniduplex serve: turn-based deployments are not served yet", file=sys.stderr)
        return 2
    if args.max_sessions is not None:
        session = {**pipeline.duplex_session, "max_sessions": args.max_sessions}
        pipeline = dataclasses.replace(pipeline, duplex_session=session)
    omni = DuplexOmni(pipeline)
    model_name = pipeline.served_model_name or pipeline.name
    app = build_app(omni, api_key=args.api_key, model_name=model_name)
    logging.basicConfig(level=args.log_level.upper())
    # Audio in base64 does not compress; deflate would only burn CPU on every frame.
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        ws="websockets-sansio",
        ws_per_message_deflate=False,
    )
    _graceful_server_class()(config).run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="omniduplex", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("deployments", help="list the shipped deployments")
    serve = commands.add_parser("serve", help="serve a deployment over the Realtime API")
    serve.add_argument(
        "deployment", nargs="?", default=None, help="a shipped deployment name or a deploy YAML"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--api-key", default=None, help="require this key on every route")
    serve.add_argument("--max-sessions", type=int, default=None)
    serve.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    if args.command == "deployments":
        print("\n".join(_deployments()))
        return 0
    return _serve(args)


if __name__ == "__main__":
    raise SystemExit(main())
