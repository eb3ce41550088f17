"""The documentation site builds in strict mode: a broken link, a missing anchor or a page
left out of the nav fails here, as the README's links into docs/ would fail a reader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_mkdocs_builds_the_site_in_strict_mode(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "models" / "index.html").is_file()


def test_every_readme_link_into_docs_names_a_page_that_exists() -> None:
    readme = (ROOT / "README.md").read_text()
    linked = {part.split(")")[0].split("#")[0] for part in readme.split("](docs/")[1:]}
    assert linked, "the README links into docs/"
    missing = sorted(name for name in linked if not (ROOT / "docs" / name).is_file())
    assert not missing
