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


# ----- the connector: the engine's layers, and no import circles anywhere -----------------------


def connector_modules() -> dict[str, Path]:
    """Every module of the connector by dotted name (a package by its ``__init__.py``)."""
    modules: dict[str, Path] = {}
    for path in sorted((ROOT / "connector").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def import_edges(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The connector modules ``name`` imports, at module level, in functions or under TYPE_CHECKING.

    ``from package import module`` is an import of the module; ``from module import name`` of the
    module; relative imports are resolved against ``name``'s package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            candidates = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for candidate in candidates:
            # `import a.b.c` of a non-module attribute path: its longest module prefix.
            while candidate and candidate not in modules:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                targets.add(candidate)
    return targets


def connector_import_graph() -> dict[str, set[str]]:
    modules = connector_modules()
    return {name: import_edges(name, path, modules) for name, path in modules.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in order:
            continue
        work = [(root, iter(sorted(graph[root])))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in order:
                    order[child] = low[child] = len(order)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], order[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == order[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_the_circle_finder_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert import_circles(graph) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_the_connector_has_no_import_circles() -> None:
    # Lazy imports inside functions and TYPE_CHECKING imports count: a circle drawn with them is
    # still one. Where one module needs another that builds on it, the upper one registers itself
    # into a table the lower one reads (operation kinds in writes/ops.py, tool groups in
    # mcp/toolgroups.py).
    assert import_circles(connector_import_graph()) == []


def test_the_engine_subpackages_import_only_downwards() -> None:
    from connector.engine import LAYERS  # the order, bottom first, said once

    graph = connector_import_graph()
    engine = [name for name in graph if name.startswith("connector.engine.")]
    # A module directly in connector/engine (kinds.py) sits above every layer.
    rank = {name: LAYERS.index(name.split(".")[2]) if name.count(".") > 2 else len(LAYERS) for name in engine}
    subpackages = {name.split(".")[2] for name in engine if (ROOT / "connector/engine" / name.split(".")[2]).is_dir()}
    assert subpackages == set(LAYERS), "every engine subpackage is one of the layers"
    offending = [f"{name} imports {target}" for name in engine for target in graph[name] if rank.get(target, -1) > rank[name]]
    assert offending == []
    # The layers' own packages (their __init__) hold no code that could import anything.
    assert all(not graph[f"connector.engine.{layer}"] for layer in LAYERS)
