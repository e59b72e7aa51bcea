"""The package layout is the architecture: who may import whom, checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy imports inside functions count)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def first_party_imports(package: str) -> dict[Path, set[str]]:
    return {path: imported_modules(path) for path in sorted((ROOT / package).rglob("*.py"))}


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [("common", ("store", "connector", "cli")), ("store", ("connector", "cli")), ("connector", ("store", "cli"))],
)
def test_packages_import_only_downwards(package: str, forbidden: tuple[str, ...]) -> None:
    offending = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path, names in first_party_imports(package).items()
        for name in names
        if name.split(".")[0] in forbidden
    ]
    assert offending == []


def test_storage_holds_archives_and_blobs_only() -> None:
    # store/storage/ is the bottom layer of the store: archives, blobs and their backends. The
    # registries (auth, sharing) and the tools built on them (rekey, migrate) sit above it.
    allowed = ("store.storage", "store.settings")
    offending = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path, names in first_party_imports("store/storage").items()
        for name in names
        if name.split(".")[0] == "store" and not name.startswith(allowed)
    ]
    assert offending == []


def test_upload_does_not_import_the_service() -> None:
    # The service drives uploads; uploads see it only through the UploadTarget protocol.
    assert "store.service" not in imported_modules(ROOT / "store" / "upload.py")


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        # The connector's state and the pages' shared parts are below the OAuth server and the web app.
        ("connector/state", ("connector.oauth", "connector.webapp", "connector.workcopy", "connector.mcp")),
        ("connector/i18n", ("connector.oauth", "connector.web", "connector.webapp", "connector.mcp")),
        ("connector/oauth", ("connector.webapp",)),
    ],
)
def test_connector_layers_import_only_downwards(package: str, forbidden: tuple[str, ...]) -> None:
    offending = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path, names in first_party_imports(package).items()
        for name in names
        if name.startswith(forbidden)
    ]
    assert offending == []
