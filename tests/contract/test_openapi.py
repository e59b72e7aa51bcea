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

pytestmark = pytest.mark.xdist_group("contract-openapi")

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


# --- responses match the documented schemas (undocumented members fail too) -----------------

STRICT_SCHEMAS = ("Brain", "UploadResult", "Version", "VersionList", "Health", "Me", "RestoreResult")


def _strict_components(document: dict) -> dict:
    """Components where our own objects allow no undocumented members (so drift shows)."""
    import copy

    components = copy.deepcopy(document["components"])

    def close(schema: dict) -> None:
        if schema.get("type") == "object" and "properties" in schema:
            schema["additionalProperties"] = False
            for sub in schema["properties"].values():
                if isinstance(sub, dict):
                    close(sub)

    for name in STRICT_SCHEMAS:
        close(components["schemas"][name])
    return components


def _validator(document: dict, schema_name: str):  # type: ignore[no-untyped-def]
    from openapi_schema_validator import OAS31Validator

    return OAS31Validator({"$ref": f"#/components/schemas/{schema_name}", "components": _strict_components(document)})


def test_responses_match_documented_schemas(store: Store) -> None:
    from contract.conformance.archives import brain_archive

    document = _document()
    token = store.add_user("schema-checker", email="s@example.test")
    http = httpx.Client(base_url=store.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    with http:
        seen = {
            "Health": http.get("/health").json(),
            "Me": http.get("/auth/me").json(),
        }
        brain = http.post("/api/brains", json={"name": "schema"}).json()
        seen["Brain"] = brain
        first = http.put(f"/api/brains/{brain['id']}/sync", files={"brain": ("b", brain_archive("s1"), "application/gzip")})
        http.put(f"/api/brains/{brain['id']}/sync", files={"brain": ("b", brain_archive("s2"), "application/gzip")})
        seen["UploadResult"] = first.json()
        seen["VersionList"] = http.get(f"/api/brains/{brain['id']}/versions").json()
        name = seen["VersionList"]["versions"][0]["version"]
        seen["RestoreResult"] = http.post(f"/api/brains/{brain['id']}/versions/{name}/restore").json()
        listing = http.get("/api/brains").json()
        stale = http.put(f"/api/brains/{brain['id']}/sync", headers={"If-Match": '"' + "0" * 64 + '"'}, files={"brain": ("b", brain_archive("s3"), "application/gzip")})
        seen["PreconditionError"] = stale.json()
        seen["Error"] = http.get("/api/brains/00000000-0000-0000-0000-000000000000").json()
    for schema_name, body in seen.items():
        errors = [e.message for e in _validator(document, schema_name).iter_errors(body)]
        assert errors == [], f"{schema_name}: {errors} in {body}"
    for record in listing:
        assert [e.message for e in _validator(document, "Brain").iter_errors(record)] == []
