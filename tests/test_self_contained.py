"""The test suite stands on its own: no absolute paths, fixtures in the repository, HOME untouched."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import pytest

from tests.support.fixtures import IN_REPO, SHARED, recall_parity_dir
from tests.support.processes import REPO_ROOT

SUBSET = IN_REPO / "recall-parity-subset"


def test_no_test_reads_fixtures_by_absolute_path() -> None:
    offenders = []
    for path in sorted((REPO_ROOT / "tests").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if path.name != Path(__file__).name and re.search(r"""["']/(work/|[^"'\n]*/shared/)""", text):
            offenders.append(str(path.relative_to(REPO_ROOT)))
    assert not offenders, f"absolute paths in {offenders}; use tests.support.fixtures"


def test_only_the_fixture_helper_builds_paths_to_shared() -> None:
    # A path built to ../shared by hand fails on a bare clone instead of using the in-repo subset.
    helper = REPO_ROOT / "tests" / "support" / "fixtures.py"
    offenders = [
        str(path.relative_to(REPO_ROOT))
        for path in sorted((REPO_ROOT / "tests").rglob("*.py"))
        if path not in (helper, Path(__file__).resolve())
        and re.search(r"""["']shared["']\s*/\s*["']fixtures["']""", path.read_text(encoding="utf-8"))
    ]
    assert not offenders, f"paths to ../shared built in {offenders}; use tests.support.fixtures"


def test_home_is_a_temporary_directory() -> None:
    home = Path(os.environ["HOME"]).resolve()
    assert home.is_relative_to(Path(tempfile.gettempdir()).resolve()) and home.name.startswith("brain-store-test-home-")
    assert Path("~/.brain-store").expanduser().is_relative_to(home)


def test_parity_subset_is_small_and_whole() -> None:
    """The subset: under 5 MB, and its cases name only brains it holds (so none is skipped)."""
    size = sum(p.stat().st_size for p in SUBSET.rglob("*") if p.is_file())
    assert size < 5 * 1024 * 1024
    brains = {p.name for p in (SUBSET / "brains").iterdir() if (p / "index.json").is_file()}
    cases = [json.loads(line) for line in (SUBSET / "cases.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(brains) >= 3 and len(cases) >= 100
    assert {c["brain"] for c in cases} == brains


def test_parity_subset_equals_the_full_set() -> None:
    """Copied unchanged: every brain file and every case line as in ../shared (when it is there)."""
    full = SHARED / "recall-parity"
    if not full.is_dir():
        pytest.skip("../shared/fixtures is not beside the repository")
    for path in sorted((SUBSET / "brains").rglob("*")):
        if path.is_file():
            assert path.read_bytes() == (full / path.relative_to(SUBSET)).read_bytes(), path
    ours = (SUBSET / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    brains = {p.name for p in (SUBSET / "brains").iterdir()}
    theirs = [line for line in (full / "cases.jsonl").read_text(encoding="utf-8").splitlines()
              if line.strip() and json.loads(line)["brain"] in brains]
    assert ours == theirs


def test_parity_fixtures_are_found_without_configuration() -> None:
    if "RECALL_PARITY_DIR" in os.environ:
        pytest.skip("RECALL_PARITY_DIR is set")
    assert (recall_parity_dir() / "cases.jsonl").is_file()


def test_every_brain_the_engine_tests_name_is_in_the_subset() -> None:
    """A bare clone runs every write test: none skips for a brain "only in the full set"."""
    texts = [path.read_text(encoding="utf-8") for path in sorted((REPO_ROOT / "tests" / "engine").glob("*.py"))]
    named = {name for text in texts if "writes_support import" in text
             for name in re.findall(r"""["'](brain-\d-\d\d)["']""", text)}
    held = {p.name for p in (SUBSET / "brains").iterdir() if (p / "index.json").is_file()}
    assert named and named <= held, sorted(named - held)
