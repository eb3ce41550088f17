"""The talk page's static routes (no browser needed): public page, guarded API."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from omniduplex.config.pipeline import load_deploy_config
from omniduplex.entrypoints.duplex_omni import DuplexOmni
from omniduplex.entrypoints.openai.api_server import build_app
from omniduplex.entrypoints.web import STATIC_DIR

MODULES = ["app.js", "audio.js", "codec.js", "realtime.js", "resampler.js"]
WORKLETS = ["capture-worklet.js", "playback-worklet.js"]


@pytest.fixture(params=[None, "sekret"], ids=["open", "api-key"])
def client(request: pytest.FixtureRequest) -> TestClient:
    # No lifespan: the engine is not started, only routing is exercised.
    omni = DuplexOmni(load_deploy_config("loopback-fast"))
    client = TestClient(build_app(omni, api_key=request.param, model_name="loopback"))
    client.api_key = request.param  # type: ignore[attr-defined]
    return client


def test_page_is_served_without_a_key(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/web/app.js">' in page.text
    assert client.head("/").status_code == 200


def test_every_module_is_served_as_javascript(client: TestClient) -> None:
    for name in [*MODULES, *WORKLETS, "style.css"]:
        response = client.get(f"/web/{name}")
        assert response.status_code == 200, name
        kind = "text/css" if name.endswith(".css") else "text/javascript"
        assert response.headers["content-type"].startswith(kind), name
        assert response.headers["cache-control"] == "no-cache"


def test_imports_resolve_to_served_files() -> None:
    served = {path.name for path in STATIC_DIR.iterdir()}
    for name in [*MODULES, *WORKLETS]:
        text = (STATIC_DIR / name).read_text()
        for target in re.findall(r"""from\s+["']\./([\w.-]+)["']""", text):
            assert target in served, f"{name} imports missing {target}"
        for target in re.findall(r"""new URL\(["']\./([\w.-]+)["']""", text):
            assert target in served, f"{name} loads missing {target}"


def test_nothing_else_leaks_through(client: TestClient) -> None:
    for path in ["/web/../static_routes.py", "/web/static_routes.py", "/web/", "/web/nope.js"]:
        response = client.get(path)
        assert response.status_code in (401, 404), path
    assert client.post("/").status_code in (401, 404, 405)
    # The API itself stays behind the key.
    models = client.get("/v1/models")
    assert models.status_code == (401 if client.api_key else 200)  # type: ignore[attr-defined]
    if client.api_key:  # type: ignore[attr-defined]
        authorized = client.get("/v1/models", headers={"Authorization": "Bearer sekret"})
        assert authorized.status_code == 200
