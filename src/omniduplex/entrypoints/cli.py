"""``omniduplex`` command line: ``serve`` a deployment, ``bench`` a server, list
``deployments``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEPLOY_DIR = Path(__file__).resolve().parent.parent / "deploy"
DEFAULT_DEPLOYMENT = "cascade"


def _deployments() -> list[str]:
    return sorted(path.stem for path in DEPLOY_DIR.glob("*.yaml"))


# The exit status of a server stopped because its engine died (``--exit-on-engine-failure``).
ENGINE_FAILURE_EXIT_CODE = 1


def _graceful_server_class() -> type:
    import uvicorn

    class GracefulServer(uvicorn.Server):
        """On SIGTERM, sessions get ``session.closed`` (reason ``shutdown``) before uvicorn
        drops the sockets. With ``exit_on_engine_failure``, an engine that dies (a stage's
        restart budget spent) stops the server once its sessions are closed, and
        ``engine_failure`` says why."""

        def __init__(self, config: Any, *, exit_on_engine_failure: bool = False) -> None:
            super().__init__(config)
            self.exit_on_engine_failure = exit_on_engine_failure
            self.engine_failure: str | None = None
            self._engine_watch: asyncio.Task[None] | None = None

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)  # the app's lifespan has started the engine
            omni = getattr(getattr(self.config.app, "state", None), "omni", None)
            if self.exit_on_engine_failure and omni is not None and not self.should_exit:
                self._engine_watch = asyncio.create_task(self._exit_when_engine_dies(omni))

        async def _exit_when_engine_dies(self, omni: Any) -> None:
            self.engine_failure = await omni.wait_dead()
            logging.getLogger(__name__).error(
                "the engine failed (%s); exiting with status %d so a supervisor restarts "
                "the server (--no-exit-on-engine-failure keeps it up, /health answering 503)",
                self.engine_failure,
                ENGINE_FAILURE_EXIT_CODE,
            )
            self.should_exit = True

        async def shutdown(self, sockets=None) -> None:
            if self._engine_watch is not None:
                self._engine_watch.cancel()
            app = self.config.app
            handler = getattr(getattr(app, "state", None), "handlers", {}).get("handler")
            if handler is not None:
                await handler.shutdown()
            await super().shutdown(sockets)

    return GracefulServer


# A WebSocket frame above this is not read: the socket closes with 1009 (message too big).
# Events up to it are read and, over the codec's MAX_EVENT_BYTES (15 MiB), refused with a
# typed event_too_large while the socket lives.
MAX_FRAME_BYTES = 16 * 1024 * 1024


def uvicorn_config(app: Any, *, host: str, port: int, log_level: str) -> Any:
    """The uvicorn settings every omniduplex server runs with."""
    import uvicorn

    from .websocket_protocol import RealtimeWebSocketProtocol

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        ws=RealtimeWebSocketProtocol,
        ws_max_size=MAX_FRAME_BYTES,
        # Audio in base64 does not compress; deflate would only burn CPU on every frame.
        ws_per_message_deflate=False,
    )


def _serve(args: argparse.Namespace) -> int:
    from ..config.pipeline import load_deploy_config
    from .async_omni import AsyncOmni
    from .duplex_omni import DuplexOmni
    from .openai.api_server import build_app
    from .openai.origins import OriginPolicy
    from .server_logging import configure_server_logs
    from .turn_responses import turn_plugin

    try:
        pipeline = load_deploy_config(args.deployment or DEFAULT_DEPLOYMENT)
    except (OSError, ValueError) as exc:
        print(f"omniduplex serve: {exc}", file=sys.stderr)
        return 2
    if args.max_sessions is not None:
        session = {**pipeline.duplex_session, "max_sessions": args.max_sessions}
        pipeline = dataclasses.replace(pipeline, duplex_session=session)
    model_name = pipeline.served_model_name or pipeline.name
    origins = OriginPolicy.for_bind(
        args.host, allowed_hosts=args.allowed_host, allowed_origins=args.allowed_origin
    )
    cluster = None
    if args.ray is not None:
        if pipeline.session_mode != "duplex":
            print("omniduplex serve: --ray serves duplex deployments only", file=sys.stderr)
            return 2
        from .cluster.app import build_cluster_app
        from .cluster.ray_backend import ClusterUnavailableError, RayCluster

        try:
            cluster = RayCluster.connect(args.ray, pipeline)
        except (ClusterUnavailableError, ValueError) as exc:
            print(f"omniduplex serve: {exc}", file=sys.stderr)
            return 2
        app = build_cluster_app(
            cluster, api_key=args.api_key, model_name=model_name, origins=origins
        )
    elif pipeline.session_mode == "duplex":
        app = build_app(
            DuplexOmni(pipeline), api_key=args.api_key, model_name=model_name, origins=origins
        )
    else:
        # Turn-based: the same stages through AsyncOmni; the model's plugin (if it has one)
        # only plans chat requests and reads their outputs.
        app = build_app(
            AsyncOmni(pipeline),
            api_key=args.api_key,
            model_name=model_name,
            plugin=turn_plugin(pipeline),
            origins=origins,
        )
    logging.basicConfig(level=args.log_level.upper())
    config = uvicorn_config(app, host=args.host, port=args.port, log_level=args.log_level)
    configure_server_logs([args.api_key] if args.api_key else [])  # uvicorn's handlers exist now
    server = _graceful_server_class()(config, exit_on_engine_failure=args.exit_on_engine_failure)
    try:
        server.run()
    finally:
        if cluster is not None:
            cluster.stop()
    return 0 if server.engine_failure is None else ENGINE_FAILURE_EXIT_CODE


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
    serve.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        help="a web origin whose pages may call the server (repeatable; * for any); "
        "the server's own page always may",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        help="a Host name the server answers to (repeatable; * for any); default: the "
        "loopback names when bound to a loopback address, any otherwise",
    )
    serve.add_argument(
        "--exit-on-engine-failure",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="when a stage worker dies past its restart budget, close every session and "
        f"exit with status {ENGINE_FAILURE_EXIT_CODE} so a supervisor (systemd, Kubernetes) "
        "starts a fresh server (default); --no-exit-on-engine-failure keeps the process up, "
        "refusing sessions and answering /health with 503",
    )
    serve.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="serve the deployment's engine replicas on a Ray cluster (its cluster: section): "
        "HOST:PORT of the head's GCS, or auto (the local cluster, started if none runs); "
        "this process is then a stateless front end, and any number of them may run",
    )
    bench = commands.add_parser("bench", help="load-test a Realtime server (omniduplex.bench)")
    from ..bench.cli import add_arguments as add_bench_arguments

    add_bench_arguments(bench)
    args = parser.parse_args(argv)
    if args.command == "bench":
        from ..bench.cli import run_command as run_bench_command

        return run_bench_command(args)
    if args.command == "deployments":
        print("\n".join(_deployments()))
        return 0
    return _serve(args)


if __name__ == "__main__":
    raise SystemExit(main())
