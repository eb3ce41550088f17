"""Serving only transports: it imports no model code and only the public engine API.

The public engine API, for everything under ``entrypoints/`` that is not the in-process
API itself (the routes, the Realtime connection, the CLI):

- the in-process API modules, any name: ``omni_base``, ``async_omni_base``,
  ``async_omni`` (``AsyncOmni``, stage tasks), ``duplex_omni`` (``DuplexOmni``, the
  session handle) and ``turn_responses`` (the chat completions seam); they re-export the
  engine's value types their callers need;
- ``omniduplex.engine.errors``, the exceptions the engine raises to its callers;
- the names in ``PUBLIC_ENGINE_NAMES``: values the engine raises or returns that live
  beside its internals.

Nothing under ``entrypoints/`` imports ``omniduplex.model_executor``: model work runs in
the engine (checked statically, and in a fresh interpreter for what importing the
server loads).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import omniduplex

PACKAGE = Path(omniduplex.__file__).parent
ENTRYPOINTS = PACKAGE / "entrypoints"
IN_PROCESS_API = frozenset(
    {"omni_base.py", "async_omni_base.py", "async_omni.py", "duplex_omni.py", "turn_responses.py"}
)
ENGINE = "omniduplex.engine"
MODELS = "omniduplex.model_executor"
ENGINE_ERRORS = "omniduplex.engine.errors"
PUBLIC_ENGINE_NAMES = {
    "omniduplex.engine.duplex.messages": frozenset({"DuplexSessionError", "OpenResult"}),
}
SERVER_MODULES = [
    "omniduplex.entrypoints.cli",
    "omniduplex.entrypoints.openai.api_server",
    "omniduplex.entrypoints.openai.audio_routes",
    "omniduplex.entrypoints.duplex.chat_completions",
    "omniduplex.entrypoints.duplex.serving",
]


def imports_of(source: str, module_path: str) -> list[tuple[str, str | None]]:
    """``(module, name)`` for every import in ``source`` (``name`` None for ``import m``),
    relative imports resolved against ``module_path``'s package."""
    package = module_path.split(".")[:-1]
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            found.extend((module, alias.name) for alias in node.names)
    return found


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violation(module: str, name: str | None) -> str | None:
    """Why importing ``name`` from ``module`` crosses the serving boundary, or None."""
    # ``from omniduplex.engine import errors`` names a module too.
    targets = [module] if name is None else [module, f"{module}.{name}"]
    if any(_within(target, MODELS) for target in targets):
        return "model code"
    if not any(_within(target, ENGINE) for target in targets):
        return None
    if _within(module, ENGINE_ERRORS) or f"{module}.{name}" == ENGINE_ERRORS:
        return None
    if name is not None and name in PUBLIC_ENGINE_NAMES.get(module, ()):
        return None
    return "engine internals"


def serving_files() -> list[Path]:
    return [
        path
        for path in sorted(ENTRYPOINTS.rglob("*.py"))
        if not (path.parent == ENTRYPOINTS and path.name in IN_PROCESS_API)
    ]


def _module_path(path: Path) -> str:
    return ".".join(("omniduplex", *path.relative_to(PACKAGE).with_suffix("").parts))


def test_the_checker_flags_model_code_and_engine_internals() -> None:
    source = "\n".join(
        [
            "from ...engine.duplex.plugin import DuplexModelPlugin",
            "from ...engine.stage import StageInput",
            "import omniduplex.model_executor.models.cascade.asr",
            "from omniduplex import model_executor",
            "from ...engine.errors import EngineError",
            "from ...engine import errors",
            "from ...engine.duplex.messages import DuplexSessionError",
            "from ...engine.duplex.messages import SessionEventMessage",
            "from ..async_omni import AsyncOmni",
            "from ...protocol.duplex import ErrorEvent",
        ]
    )
    imports = imports_of(source, "omniduplex.entrypoints.openai.routes")
    verdicts = [violation(module, name) for module, name in imports]
    assert verdicts == [
        "engine internals",
        "engine internals",
        "model code",
        "model code",
        None,
        None,
        None,
        "engine internals",
        None,
        None,
    ]


def test_serving_imports_only_the_public_engine_api() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE)}: {module}{'.' + name if name else ''} ({why})"
        for path in serving_files()
        for module, name in imports_of(path.read_text(), _module_path(path))
        if (why := violation(module, name)) is not None
    ]
    assert serving_files(), "no serving modules found"
    assert offenders == []


def test_no_entrypoint_imports_model_code() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE)}: {module}"
        for path in sorted(ENTRYPOINTS.rglob("*.py"))
        for module, name in imports_of(path.read_text(), _module_path(path))
        if violation(module, name) == "model code"
    ]
    assert offenders == []


def test_importing_the_server_loads_no_model_code() -> None:
    probe = (
        "import importlib, json, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, *SERVER_MODULES],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = json.loads(result.stdout)
    assert set(SERVER_MODULES) <= set(loaded)
    assert [name for name in loaded if _within(name, MODELS)] == []
