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


def test_the_idle_connection_timeout_is_said_alike_everywhere() -> None:
    """The servers close idle keep-alive connections after KEEP_ALIVE_SECONDS; no page says otherwise."""
    from cli.serving import KEEP_ALIVE_SECONDS

    said = []
    for page in [*DOCS.glob("*.md"), REPO_ROOT / "README.md"]:
        text = re.sub(r"\s+", " ", page.read_text())
        said += [(page.name, int(seconds)) for seconds in
                 re.findall(r"(?:idle keep-alive connections?|pauses for more than)[^.]{0,40}? (\d+) ?s\b", text, re.I)]
    assert said and all(seconds == KEEP_ALIVE_SECONDS for _, seconds in said), said
