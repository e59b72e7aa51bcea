"""The operator docs: every relative link resolves, and docs/README.md lists every operator page."""

from __future__ import annotations

import re

from tests.support.processes import REPO_ROOT

DOCS = REPO_ROOT / "docs"


def test_relative_links_resolve() -> None:
    for page in DOCS.glob("*.md"):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_index_lists_every_page() -> None:
    index = (DOCS / "README.md").read_text()
    for page in DOCS.glob("*.md"):
        if page.name != "README.md" and not page.name.startswith("store"):  # store*.md: S1 links its own
            assert f"({page.name})" in index, f"docs/README.md does not link {page.name}"
