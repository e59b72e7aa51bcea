"""contract/openapi.yaml is a valid OpenAPI 3.1 document, served verbatim, and matches the routes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from openapi_spec_validator import validate

from tests.contract.harness import Store, running_store
from tests.support.processes import REPO_ROOT

OPENAPI_PATH = REPO_ROOT / "contract" / "openapi.yaml"
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
# Methods the framework answers on its own for every route; not part of our surface.
IMPLICIT_METHODS = {"OPTIONS"}


def _document() -> dict:
    return yaml.safe_load(OPENAPI_PATH.read_text())


def _normalise(path: str) -> str:
    """'/api/brains/{brain_id:uuid}' and '/api/brains/{id}' both become '/api/brains/{}'."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def documented_operations(document: dict) -> set[tuple[str, str]]:
    """(normalised path, METHOD) for every operation in the document."""
    return {
        (_normalise(path), method.upper())
        for path, item in document["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def served_operations(app: object) -> set[tuple[str, str]]:
    """(normalised path, METHOD) for every HTTP route the Litestar app registers."""
    from litestar.routes import HTTPRoute

    found = set()
    for route in app.routes:  # type: ignore[attr-defined]
        if not isinstance(route, HTTPRoute):
            continue
        for method in route.methods:
            if method not in IMPLICIT_METHODS:
                found.add((_normalise(route.path), method))
    return found


def build_app(data_dir: Path) -> object:
    """Our Litestar app from its factory, on an empty data directory."""
    from store.app import create_app
    from store.settings import StoreSettings

    return create_app(StoreSettings.from_env({}, data_dir=data_dir, rate_limits=False))


def test_document_is_valid_openapi_31() -> None:
    document = _document()
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_document_declares_bearer_and_core_schemas() -> None:
    document = _document()
    scheme = document["components"]["securitySchemes"]["bearer"]
    assert scheme == {**scheme, "type": "http", "scheme": "bearer"}
    for name in ("Brain", "Error", "UploadResult", "VersionList", "PreconditionError"):
        assert name in document["components"]["schemas"], name
    assert document["paths"]["/health"]["get"]["security"] == []


def test_every_route_is_documented_and_every_documented_route_is_served(tmp_path: Path) -> None:
    served = served_operations(build_app(tmp_path / "data"))
    documented = documented_operations(_document())
    assert served, "the app registers no HTTP routes?"
    assert served - documented == set(), "routes served but missing from contract/openapi.yaml"
    assert documented - served == set(), "routes documented in contract/openapi.yaml but not served"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with running_store(tmp_path_factory.mktemp("openapi") / "data") as running:
        yield running


def test_served_document_equals_the_file(store: Store) -> None:
    resp = httpx.get(store.url + "/openapi.yaml", timeout=10)
    assert resp.status_code == 200
    assert resp.content == OPENAPI_PATH.read_bytes()
    assert "yaml" in resp.headers["content-type"]


def test_framework_schema_endpoints_are_off(store: Store) -> None:
    for path in ("/schema", "/schema/openapi.json", "/schema/openapi.yaml", "/schema/swagger"):
        assert httpx.get(store.url + path, timeout=10).status_code in (401, 404), path
