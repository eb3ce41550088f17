"""The codec's import boundaries and its single-source rule."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import omniduplex

PACKAGE = Path(omniduplex.__file__).parent
PROTOCOL = PACKAGE / "protocol"
FORBIDDEN = (
    "omniduplex.engine",
    "omniduplex.entrypoints",
    "omniduplex.model_executor",
    "omniduplex.clients",
)


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return set(result.stdout.split())


def test_protocol_imports_nothing_above_it() -> None:
    loaded = _loaded_after("import omniduplex.protocol.duplex, omniduplex.protocol.realtime.events")
    leaked = sorted(m for m in loaded if m.startswith(FORBIDDEN))
    assert leaked == []


def _absolute_imports(path: Path) -> list[str]:
    """Every module a file imports, with relative imports resolved against its package."""
    tree = ast.parse(path.read_text())
    package = ".".join(("omniduplex", *path.relative_to(PACKAGE).parent.parts))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            out.append(module)
            out.extend(f"{module}.{alias.name}" for alias in node.names)
    return out


def test_protocol_realtime_is_imported_only_inside_protocol() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if PROTOCOL in path.parents:
            continue
        for module in _absolute_imports(path):
            if module.startswith("omniduplex.protocol.realtime"):
                offenders.append(f"{path.relative_to(PACKAGE)} imports {module}")
    assert offenders == []


def test_protocol_modules_do_not_import_consumers() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in PROTOCOL.rglob("*.py")
        for module in _absolute_imports(path)
        if module.startswith(FORBIDDEN)
    ]
    assert offenders == []


def _definitions() -> dict[str, list[tuple[str, ast.AST]]]:
    found: dict[str, list[tuple[str, ast.AST]]] = defaultdict(list)
    for path in PROTOCOL.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found[node.name].append((str(path.relative_to(PROTOCOL)), node))
    return found


def _is_twin(nodes: list[tuple[str, ast.AST]]) -> bool:
    """A Tier-2 class that subclasses its Tier-1 twin of the same name is allowed."""
    if len(nodes) != 2 or not all(isinstance(n, ast.ClassDef) for _, n in nodes):
        return False
    (_, first), (_, second) = nodes
    names = {first.name}
    bases = [ast.unparse(b) for b in (*first.bases, *second.bases)]
    return any(b.split(".")[-1] in names for b in bases)


def test_each_helper_is_defined_once() -> None:
    duplicated = {
        name: [where for where, _ in nodes]
        for name, nodes in _definitions().items()
        if len(nodes) > 1 and not _is_twin(nodes)
    }
    assert duplicated == {}


def test_no_two_functions_share_a_body() -> None:
    bodies: dict[str, list[str]] = defaultdict(list)
    for name, nodes in _definitions().items():
        for where, node in nodes:
            if isinstance(node, ast.FunctionDef) and len(node.body) >= 2:
                body = ast.dump(ast.Module(body=node.body, type_ignores=[]))
                bodies[body].append(f"{where}:{name}")
    shared = [places for places in bodies.values() if len(places) > 1]
    assert shared == []
