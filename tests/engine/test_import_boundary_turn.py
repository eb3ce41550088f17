"""The turn-based stack loads no duplex module (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""

TURN_BASED_MODULES = [
    "omniduplex.engine",
    "omniduplex.engine.stage",
    "omniduplex.engine.orchestrator",
    "omniduplex.engine.omni_engine_base",
    "omniduplex.engine.async_omni_engine",
    "omniduplex.config",
    "omniduplex.entrypoints",
    "omniduplex.entrypoints.omni_base",
    "omniduplex.entrypoints.async_omni_base",
    "omniduplex.entrypoints.async_omni",
]


def duplex_modules(names: list[str]) -> list[str]:
    # The package itself is called omniduplex, so its root component is no evidence of a
    # duplex dependency; every other dotted component (and any other package) is.
    def is_duplex(name: str) -> bool:
        parts = name.split(".")
        if parts[0] == "omniduplex":
            parts = parts[1:]
        return any("duplex" in part for part in parts)

    return [name for name in names if is_duplex(name)]


def modules_loaded_by(*modules: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout)


def test_filter_flags_duplex_modules_but_not_the_package_root():
    names = [
        "omniduplex",
        "omniduplex.engine.stage",
        "omniduplex.engine.duplex_orchestrator",
        "omniduplex.protocol.duplex",
        "omniduplex.entrypoints.duplex.serving",
        "some_duplex_lib",
    ]
    assert duplex_modules(names) == names[2:]


def test_turn_based_stack_loads_no_duplex_module():
    loaded = modules_loaded_by(*TURN_BASED_MODULES)
    assert set(TURN_BASED_MODULES) <= set(loaded)
    assert duplex_modules(loaded) == []


@pytest.mark.parametrize(
    "module", ["omniduplex.engine.async_omni_engine", "omniduplex.entrypoints.async_omni"]
)
def test_each_entry_module_alone(module):
    assert duplex_modules(modules_loaded_by(module)) == []
