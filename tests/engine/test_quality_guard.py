"""Quality guard: hybrid recall and the similar-memory check on the two development sets
in ../shared score no lower than the documentation says (issue 37, item 8).

The figures are read from the tables of docs/recall.md (hybrid, overall recall@5 and
MRR@10) and docs/memory-governance.md (the overall row of "Measured (development set)"),
so the guard follows the documentation; a change that loses quality turns this red
instead of being found at the next benchmark run. MARGIN allows for ties breaking
another way (one query of 150 is 0.007, one item of 45 duplicates or updates 0.022).

Without ../shared (a bare clone) the tests skip, saying why; under ``CI=true`` they fail
instead (tests/support/tools.py), as CI has ../shared beside the repository. The two sets
share one brain, so one vector store embeds it once for both (12-25 s of wall time for
the module on two cores at load 10-14).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from connector.workcopy.vectors import VectorStore, e5_store
from tests.support.fixtures import SHARED
from tests.support.processes import REPO_ROOT
from tests.support.tools import needs_tool

sys.path.insert(0, str(REPO_ROOT / "bench"))
import recall_quality  # type: ignore[import-not-found]  # noqa: E402
import similar_bench  # type: ignore[import-not-found]  # noqa: E402

RECALL_SET = SHARED / "recall-quality"
GOVERNANCE_SET = SHARED / "memory-governance"
# How far below the documented figure a score may fall (above, for false flags).
MARGIN = 0.03
# The column of docs/recall.md's channel tables that holds what hybrid recall ships.
SHIPPED = "fusion (shipped)"

pytestmark = pytest.mark.xdist_group("quality-guard")  # one worker, so the brain is embedded once
needs_sets = needs_tool(
    (RECALL_SET / "queries.jsonl").is_file() and (GOVERNANCE_SET / "incoming.jsonl").is_file(),
    f"the development sets are not in {SHARED} (../shared beside the repository): nothing to guard quality on",
)


def markdown_table(path: Path, first_header: str, column: str | None = None) -> list[dict[str, str]]:
    """The rows (header -> cell, ``**`` dropped) of the first table in ``path`` whose first
    header cell is ``first_header``, that has an ``overall`` row (and ``column``, if given)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for start, line in enumerate(lines):
        cells = [cell.strip().replace("**", "") for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or cells[0] != first_header or (column is not None and column not in cells):
            continue
        rows = []
        for row in lines[start + 2:]:
            if not row.startswith("|"):
                break
            values = [cell.strip().replace("**", "") for cell in row.strip().strip("|").split("|")]
            rows.append(dict(zip(cells, values, strict=True)))
        if any(row[first_header] == "overall" for row in rows):
            return rows
    raise AssertionError(f"{path.name}: no table headed {first_header!r} with an overall row"
                         + (f" and a column {column!r}" if column is not None else ""))


def overall(rows: list[dict[str, str]], first_header: str) -> dict[str, str]:
    return next(row for row in rows if row[first_header] == "overall")


def test_tables_are_read_as_written(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("| slice | n | x |\n|---|---:|---:|\n| en | 2 | 0.5 |\n\n"
                   "| category | y (z) |\n|---|---:|\n| a | 0.1 (0.2) |\n| **overall** | **0.907 (0.854)** |\n")
    assert overall(markdown_table(doc, "category"), "category") == {"category": "overall", "y (z)": "0.907 (0.854)"}
    with pytest.raises(AssertionError, match="no table headed 'slice'"):
        markdown_table(doc, "slice")
    with pytest.raises(AssertionError, match="and a column 'w'"):
        markdown_table(doc, "category", "w")


@pytest.fixture(scope="module")
def vectors() -> VectorStore:
    """One store of vectors for both sets (they share the recall-quality brain)."""
    return VectorStore()


@pytest.fixture(scope="module")
def e5() -> VectorStore | None:
    """The e5 channel's store (None where its engine cannot load): hybrid is scored as the
    connector recalls once a brain's e5 vectors are there."""
    return e5_store()


@needs_sets
def test_hybrid_recall_on_the_development_set_keeps_its_documented_quality(vectors: VectorStore, e5: VectorStore | None) -> None:
    # The recall-quality table of the channels beside the shipped fusion (r@5 / MRR@10).
    documented = overall(markdown_table(REPO_ROOT / "docs" / "recall.md", "category", SHIPPED), "category")
    recall_at_5, mrr_at_10 = map(float, re.findall(r"\d\.\d+", documented[SHIPPED]))
    report = recall_quality.run(RECALL_SET, ["hybrid"], False, [], False, vectors, e5)
    measured = report["hybrid"]["overall"]
    assert measured["queries"] == int(documented["n"])
    assert measured["recall@5"] >= recall_at_5 - MARGIN, (measured, documented)
    assert measured["mrr@10"] >= mrr_at_10 - MARGIN, (measured, documented)


@needs_sets
def test_the_similar_check_on_the_development_set_keeps_its_documented_quality(vectors: VectorStore) -> None:
    documented = overall(markdown_table(REPO_ROOT / "docs" / "memory-governance.md", "slice"), "slice")
    table, _ = similar_bench.evaluate(GOVERNANCE_SET, lambda brain: similar_bench.in_process_runner(brain, vectors))
    measured = table["overall"]
    assert measured["n"] == int(documented["n"]) and measured["errors"] == 0
    for name in ("dup flag recall", "update flag recall", "right relation", "precision", "strict"):
        key = name.replace(" ", "_")
        assert measured[key] >= float(documented[name]) - MARGIN, (name, measured[key], documented[name])
    for name in ("false flags related", "false flags unrelated"):
        key = name.replace(" ", "_")
        assert measured[key] <= float(documented[name]) + MARGIN, (name, measured[key], documented[name])
