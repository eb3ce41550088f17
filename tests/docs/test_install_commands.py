"""The README's two commands install from the committed locks, CI runs exactly the README's
test command, and the locks still satisfy pyproject.toml: a range edited without
`requirements/refresh` fails here, before a fresh machine installs something CI never ran."""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
TEST_LOCK = "requirements/test.txt"
SERVE_LOCK = "requirements/serve.txt"
PIP_INSTALL = ["python3", "-m", "pip", "install"]


def readme_commands() -> tuple[str, str]:
    """The first command (install and serve) and the second (install and test)."""
    block = (ROOT / "README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2, commands
    serve, test = commands
    assert serve.endswith("omniduplex serve") and test.endswith("python3 -m pytest -q")
    return serve, test


def pip_installs(command: str) -> list[list[str]]:
    """The arguments of every `python3 -m pip install` in a shell command line."""
    words = shlex.split(command.replace("(", " ").replace(")", " "))
    starts = [i for i in range(len(words) - 3) if words[i : i + 4] == PIP_INSTALL]
    installs = []
    for start in starts:
        args = []
        for word in words[start + 4 :]:
            if word in {"&&", "||", ";"}:
                break
            args.append(word)
        installs.append(args)
    return installs


def locked_pins(lock: str) -> dict[tuple[str, str], str]:
    """(package, marker) -> pinned version, from a lock `requirements/refresh` wrote."""
    pins = {}
    for line in (ROOT / lock).read_text().splitlines():
        if not line or line.startswith((" ", "#")):
            continue
        requirement = Requirement(line)
        (specifier,) = requirement.specifier
        assert specifier.operator == "==", line
        pins[canonicalize_name(requirement.name), str(requirement.marker or "")] = specifier.version
    return pins


def test_ci_runs_exactly_the_readmes_test_command_in_a_new_virtual_environment() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    lines = [line for line in script.splitlines() if line.strip()]
    assert lines[-1] == readme_commands()[1]
    assert 'python3 -m venv "$venv"' in script and 'source "$venv/bin/activate"' in script
    assert re.search(r'venv="\$\(mktemp -d ', script), "a new folder each run"


def test_every_install_in_both_commands_is_constrained_by_its_lock() -> None:
    serve, test = readme_commands()
    for command, lock in ((serve, SERVE_LOCK), (test, TEST_LOCK)):
        for args in pip_installs(command):
            if "--no-deps" in args:
                continue  # a single pinned wheel installed beside the lock (moshi)
            assert args[:2] == ["-c", lock], (lock, args)


def test_the_install_page_shows_the_readmes_commands() -> None:
    page = (ROOT / "docs" / "install.md").read_text()
    for command in readme_commands():
        assert command in page


def test_the_test_lock_satisfies_every_range_in_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in ("test", "personaplex", "semantic-vad", "llm"):
        wanted += project["optional-dependencies"][extra]
    pins = locked_pins(TEST_LOCK)
    for line in wanted:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        versions = [version for (pinned, _), version in pins.items() if pinned == name]
        assert versions, f"{name} is not in {TEST_LOCK}: run requirements/refresh"
        for version in versions:
            assert requirement.specifier.contains(version, prereleases=True), (line, version)


def test_the_readmes_torch_is_the_one_the_lock_was_resolved_with() -> None:
    (torch,) = [
        arg for args in pip_installs(readme_commands()[1]) for arg in args if "torch==" in arg
    ]
    assert locked_pins(TEST_LOCK)["torch", ""] == torch.split("==")[1]


def test_the_server_installs_the_versions_the_tests_ran_on() -> None:
    tested = {(name, version) for (name, _), version in locked_pins(TEST_LOCK).items()}
    served = {(name, version) for (name, _), version in locked_pins(SERVE_LOCK).items()}
    assert served, SERVE_LOCK
    # markers may differ (a package one platform needs for another reason), versions not
    assert served - tested == set()


def test_the_test_command_installs_the_javascript_clients_from_their_lock() -> None:
    test = readme_commands()[1]
    assert "npm ci --prefix tests/compat/js" in test  # ci installs exactly the lock
    js = ROOT / "tests" / "compat" / "js"
    manifest = json.loads((js / "package.json").read_text())
    lock = json.loads((js / "package-lock.json").read_text())
    for name, version in manifest["dependencies"].items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), (name, version)  # pinned, no range
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
