"""``omniduplex`` command line: ``serve`` a deployment, ``bench`` a server, list
``deployments``.

Whatever stops ``serve`` before the server is ready (a deploy file, a model that cannot
load, a port in use, a Ray head that does not answer) is one line on stderr, ``omniduplex:
error: ...``, and a non-zero exit status (``CONFIG_ERROR_EXIT_CODE`` when the command line
or the deploy file is wrong, ``STARTUP_FAILURE_EXIT_CODE`` when the deployment could not
start); the traceback is printed only with ``--log-level debug``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import errno
import logging
import socket
import ssl
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

DEPLOY_DIR = Path(__file__).resolve().parent.parent / "deploy"
DEFAULT_DEPLOYMENT = "cascade"


def _deployments() -> list[str]:
    return sorted(path.stem for path in DEPLOY_DIR.glob("*.yaml"))


# The exit status of a server stopped because its engine died (``--exit-on-engine-failure``).
ENGINE_FAILURE_EXIT_CODE = 1
# The command line or the deploy file is wrong: nothing was started.
CONFIG_ERROR_EXIT_CODE = 2
# The deployment could not start (a model, a GPU, the port); uvicorn's own code for it.
STARTUP_FAILURE_EXIT_CODE = 3


class StartupError(Exception):
    """Why ``omniduplex serve`` cannot start, in words a person can act on: what is wrong,
    which key or file, what to do. ``main`` prints it as one line and returns
    ``exit_code``; what caused it (``__cause__``) is printed only at ``--log-level debug``."""

    def __init__(self, message: str, *, exit_code: int = STARTUP_FAILURE_EXIT_CODE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class StartupLogFilter(logging.Filter):
    """Until the server is ready, keeps tracebacks out of the log: a record's exception
    (a stage's ``model construction failed``) is reduced to its message, and uvicorn's
    ``Application startup failed. Exiting.`` is dropped, for the CLI says why in one line.
    Once ``ready()`` says so it passes everything, so a failure while serving keeps its
    traceback."""

    def __init__(self, ready: Callable[[], bool]) -> None:
        super().__init__()
        self._ready = ready

    def filter(self, record: logging.LogRecord) -> bool:
        if self._ready():
            return True
        if record.name.startswith("uvicorn") and record.getMessage() == _UVICORN_STARTUP_FAILED:
            return False
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True


_UVICORN_STARTUP_FAILED = "Application startup failed. Exiting."


class LifespanWatch:
    """The app as uvicorn sees it, keeping what made its startup fail (``startup_error``)
    for the CLI to say. ``quiet``: the ``lifespan.startup.failed`` message goes without
    its text, the whole traceback that Starlette puts there for uvicorn to log."""

    def __init__(self, app: Any, *, quiet: bool) -> None:
        self.app = app
        self.quiet = quiet
        self.startup_error: BaseException | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched_send(message: Any) -> None:
            nonlocal started
            kind = message.get("type")
            started = started or kind == "lifespan.startup.complete"
            if kind == "lifespan.startup.failed" and self.quiet:
                message = {**message, "message": ""}
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        except BaseException as exc:
            if not started:
                self.startup_error = exc
            raise


def check_port_free(host: str, port: int) -> None:
    """Fail at once, before any model loads, when ``host:port`` cannot be listened on.

    uvicorn binds only after the app's startup, which loads every model; a port in use
    would otherwise be found minutes later. Port 0 (any free port) needs no check."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(
            f"--host {host!r} is not an address this machine can listen on ({exc.strerror}); "
            "pass an IP address (127.0.0.1, 0.0.0.0) or a name that resolves here",
            exit_code=CONFIG_ERROR_EXIT_CODE,
        ) from exc
    if port == 0:
        return
    for family, kind, proto, _, address in dict.fromkeys(
        (info[0], info[1], info[2], None, info[4]) for info in addresses
    ):
        with socket.socket(family, kind, proto) as probe:
            # As uvicorn (asyncio) binds: address reuse on, IPv6 sockets IPv6 only.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPV6_V6ONLY"):
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise StartupError(
                        f"port {port} on {host} is already in use: stop what listens there "
                        f"(`ss -ltnp 'sport = :{port}'` names it) or pass --port with a free "
                        "port"
                    ) from exc
                raise StartupError(
                    f"cannot listen on {host}:{port} ({exc.strerror}); pass another --host "
                    "or --port (ports below 1024 need privileges)"
                ) from exc


def check_tls_files(certfile: str | None, keyfile: str | None) -> None:
    """Fail at once, before any model loads, when the TLS flags cannot be served."""
    if certfile is None and keyfile is None:
        return
    if certfile is None or keyfile is None:
        raise StartupError(
            "--ssl-certfile and --ssl-keyfile go together: pass both (or neither for plain "
            "http/ws)",
            exit_code=CONFIG_ERROR_EXIT_CODE,
        )
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise StartupError(
            f"cannot serve TLS with --ssl-certfile {certfile} --ssl-keyfile {keyfile}: {exc}",
            exit_code=CONFIG_ERROR_EXIT_CODE,
        ) from exc


def _graceful_server_class() -> type:
    import uvicorn

    class GracefulServer(uvicorn.Server):
        """On SIGTERM, sessions get ``session.closed`` (reason ``shutdown``) before uvicorn
        drops the sockets. With ``exit_on_engine_failure``, an engine that dies (a stage's
        restart budget spent) stops the server once its sessions are closed, and
        ``engine_failure`` says why."""

        def __init__(
            self, config: Any, *, app: Any = None, exit_on_engine_failure: bool = False
        ) -> None:
            super().__init__(config)
            # The FastAPI app (config.app may be a wrapper around it).
            self.app = config.app if app is None else app
            self.exit_on_engine_failure = exit_on_engine_failure
            self.engine_failure: str | None = None
            self._engine_watch: asyncio.Task[None] | None = None

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)  # the app's lifespan has started the engine
            omni = getattr(getattr(self.app, "state", None), "omni", None)
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
            handler = getattr(getattr(self.app, "state", None), "handlers", {}).get("handler")
            if handler is not None:
                await handler.shutdown()
            await super().shutdown(sockets)

    return GracefulServer


# A WebSocket frame above this is not read: the socket closes with 1009 (message too big).
# Events up to it are read and, over the codec's MAX_EVENT_BYTES (15 MiB), refused with a
# typed event_too_large while the socket lives.
MAX_FRAME_BYTES = 16 * 1024 * 1024


def uvicorn_config(
    app: Any,
    *,
    host: str,
    port: int,
    log_level: str,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
) -> Any:
    """The uvicorn settings every omniduplex server runs with; with a certificate and its
    key it serves TLS (https, wss), which some clients insist on (the ``openai`` npm
    package's Realtime client connects only over wss)."""
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
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
    )


def _serve(args: argparse.Namespace) -> int:
    debug = args.log_level.lower() in ("debug", "trace")
    try:
        return _run_server(args, debug=debug)
    except StartupError as exc:
        if debug and exc.__cause__ is not None:
            traceback.print_exception(exc.__cause__)
        print(f"omniduplex: error: {exc}", file=sys.stderr)
        return exc.exit_code


def _run_server(args: argparse.Namespace, *, debug: bool) -> int:
    """Serve until stopped; anything that stops it before it is ready is a ``StartupError``."""
    from ..config.pipeline import load_deploy_config, resolve_deploy_path

    deployment = args.deployment or DEFAULT_DEPLOYMENT
    try:
        deploy_file = str(resolve_deploy_path(deployment))
        pipeline = load_deploy_config(deployment)
    except (OSError, ValueError) as exc:
        raise StartupError(str(exc), exit_code=CONFIG_ERROR_EXIT_CODE) from exc
    check_port_free(args.host, args.port)
    check_tls_files(args.ssl_certfile, args.ssl_keyfile)
    where = f"cannot start {pipeline.name} ({deploy_file})"
    try:
        app, cluster = _build_server_app(args, pipeline)
    except StartupError:
        raise
    except Exception as exc:
        raise StartupError(f"{where}: {type(exc).__name__}: {exc}") from exc

    from .server_logging import configure_server_logs

    logging.basicConfig(level=args.log_level.upper())
    watch = LifespanWatch(app, quiet=not debug)
    config = uvicorn_config(
        watch,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
    )
    configure_server_logs([args.api_key] if args.api_key else [])  # uvicorn's handlers exist now
    server = _graceful_server_class()(
        config, app=app, exit_on_engine_failure=args.exit_on_engine_failure
    )
    if not debug:
        _filter_server_logs(StartupLogFilter(lambda: server.started))
    try:
        server.run()
    except SystemExit as exc:
        # uvicorn exits this way when the app's startup fails or the port cannot be bound.
        if server.started:
            raise
        failed = watch.startup_error
        if failed is None:
            raise StartupError(
                f"{where}: could not listen on {args.host}:{args.port} (the line above says "
                "why); pass another --host or --port"
            ) from exc
        raise StartupError(f"{where}: {_reason(failed)}") from failed
    finally:
        if cluster is not None:
            cluster.stop()
    return 0 if server.engine_failure is None else ENGINE_FAILURE_EXIT_CODE


def _reason(exc: BaseException) -> str:
    # A ValueError or an engine error says it all; other types add their name.
    from ..engine.errors import EngineStartupError

    if isinstance(exc, EngineStartupError | ValueError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _filter_server_logs(log_filter: logging.Filter) -> None:
    from .server_logging import SERVER_LOGGERS

    for name in SERVER_LOGGERS:
        for handler in logging.getLogger(name).handlers:
            handler.addFilter(log_filter)


def pipeline_for_args(args: argparse.Namespace, pipeline: Any) -> Any:
    """``pipeline`` with what the command line adds to its deploy file: the session limits
    (``--max-sessions``, ``--max-transcription-sessions``) and ``--mcp-allow`` prefixes."""
    limits = {
        key: value
        for key, value in (
            ("max_sessions", args.max_sessions),
            ("max_transcription_sessions", args.max_transcription_sessions),
        )
        if value is not None
    }
    if limits:
        session = {**pipeline.duplex_session, **limits}
        pipeline = dataclasses.replace(pipeline, duplex_session=session)
    if args.mcp_allow:
        allowed = (*pipeline.mcp.allowed_urls, *args.mcp_allow)
        try:
            mcp = dataclasses.replace(pipeline.mcp, allowed_urls=allowed)
        except ValueError as exc:
            raise StartupError(f"--mcp-allow: {exc}", exit_code=CONFIG_ERROR_EXIT_CODE) from None
        pipeline = dataclasses.replace(pipeline, mcp=mcp)
    return pipeline


def _build_server_app(args: argparse.Namespace, pipeline: Any) -> tuple[Any, Any]:
    """The app that serves ``pipeline`` and, with ``--ray``, the cluster it fronts (the
    second value, stopped when the server ends); with ``--replicas``, the front door of
    replicas in child processes."""
    from .async_omni import AsyncOmni
    from .duplex_omni import DuplexOmni
    from .openai.api_server import build_app
    from .openai.origins import OriginPolicy
    from .turn_responses import turn_plugin

    pipeline = pipeline_for_args(args, pipeline)
    model_name = pipeline.served_model_name or pipeline.name
    origins = OriginPolicy.for_bind(
        args.host, allowed_hosts=args.allowed_host, allowed_origins=args.allowed_origin
    )
    replicas = _process_replicas(args, pipeline)
    if replicas is not None:
        from .cluster.app import build_cluster_app
        from .cluster.processes import ProcessCluster

        cluster = ProcessCluster(pipeline, replicas)
        app = build_cluster_app(
            cluster,
            api_key=args.api_key,
            model_name=model_name,
            origins=origins,
            on_startup=cluster.start,
            on_shutdown=cluster.shutdown,
        )
        return app, None  # the app's lifespan starts and stops the child processes
    if args.ray is not None:
        if pipeline.session_mode != "duplex":
            raise StartupError(
                f"--ray serves duplex deployments only; {pipeline.name} has session_mode: "
                f"{pipeline.session_mode} (serve it without --ray)",
                exit_code=CONFIG_ERROR_EXIT_CODE,
            )
        from .cluster.app import build_cluster_app
        from .cluster.ray_backend import ClusterUnavailableError, RayCluster

        try:
            cluster = RayCluster.connect(args.ray, pipeline)
        except (ClusterUnavailableError, ValueError) as exc:
            raise StartupError(str(exc), exit_code=CONFIG_ERROR_EXIT_CODE) from exc
        app = build_cluster_app(
            cluster, api_key=args.api_key, model_name=model_name, origins=origins
        )
        return app, cluster
    if pipeline.session_mode == "duplex":
        omni = DuplexOmni(pipeline)
        return build_app(omni, api_key=args.api_key, model_name=model_name, origins=origins), None
    # Turn-based: the same stages through AsyncOmni; the model's plugin (if it has one)
    # only plans chat requests and reads their outputs.
    app = build_app(
        AsyncOmni(pipeline),
        api_key=args.api_key,
        model_name=model_name,
        plugin=turn_plugin(pipeline),
        origins=origins,
    )
    return app, None


def _process_replicas(args: argparse.Namespace, pipeline: Any) -> int | None:
    """How many child-process replicas to serve (``--replicas``, or the deploy YAML's
    ``cluster: {backend: processes}``); ``None``: serve in this one process (or on Ray)."""
    from .cluster.config import ClusterConfig

    try:
        config = ClusterConfig.from_mapping(pipeline.cluster) if pipeline.cluster else None
    except ValueError as exc:
        raise StartupError(str(exc), exit_code=CONFIG_ERROR_EXIT_CODE) from exc
    replicas = args.replicas
    if replicas is None and args.ray is None and config is not None:
        replicas = config.replicas if config.backend == "processes" else None
    if replicas is None:
        return None
    if args.ray is not None:
        raise StartupError(
            "--replicas starts replicas on this machine and --ray on a Ray cluster: pass one",
            exit_code=CONFIG_ERROR_EXIT_CODE,
        )
    if replicas < 1:
        raise StartupError(
            f"--replicas must be at least 1, got {replicas}", exit_code=CONFIG_ERROR_EXIT_CODE
        )
    if pipeline.session_mode != "duplex":
        raise StartupError(
            f"--replicas serves duplex deployments only; {pipeline.name} has session_mode: "
            f"{pipeline.session_mode}",
            exit_code=CONFIG_ERROR_EXIT_CODE,
        )
    return int(replicas)


def build_parser() -> argparse.ArgumentParser:
    """The ``omniduplex`` command line (``main`` parses with it)."""
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
    serve.add_argument(
        "--ssl-certfile",
        default=None,
        metavar="PEM",
        help="serve TLS (https://, wss://) with this certificate (chain); needs --ssl-keyfile",
    )
    serve.add_argument("--ssl-keyfile", default=None, metavar="PEM", help="the certificate's key")
    serve.add_argument(
        "--max-transcription-sessions",
        type=int,
        default=None,
        help="transcription sessions admitted apart from --max-sessions conversations",
    )
    serve.add_argument(
        "--mcp-allow",
        action="append",
        default=[],
        metavar="PREFIX",
        help="a URL prefix of MCP servers sessions may use, private or loopback ones too "
        "(repeatable; added to the deployment's mcp.allowed_urls)",
    )
    serve.add_argument(
        "--log-level",
        default="info",
        type=str.lower,
        choices=("critical", "error", "warning", "info", "debug"),
        help="debug also prints the traceback of an error that stops the server starting",
    )
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
    serve.add_argument(
        "--replicas",
        type=int,
        default=None,
        metavar="N",
        help="serve N engine replicas on this machine, each its own process, behind this "
        "one (the same placement, resume routing and faults as --ray, without Ray); "
        "default: the deploy YAML's cluster: {backend: processes, replicas: N}, else one "
        "process",
    )
    bench = commands.add_parser("bench", help="load-test a Realtime server (omniduplex.bench)")
    from ..bench.cli import add_arguments as add_bench_arguments

    add_bench_arguments(bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
