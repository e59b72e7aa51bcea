"""Memory files: the command line's layout, valid YAML for any value, line edits."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.engine.format.frontmatter import (
    edit_frontmatter,
    frontmatter_text,
    js_number,
    render_memory_file,
    yaml_string,
)
from connector.engine.format.text import js_trim, memory_body
from tests.engine.conftest import fixture_brains

# Dates inside: tests/test_clock_ahead.py runs this module again with the clock a year ahead.
pytestmark = pytest.mark.clock

# Any text hypothesis can make (surrogates are not encodable and are excluded by default).
any_text = st.text(max_size=60)


def _fields(**overrides: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "id": "mem_20250108_032187", "type": "learning", "cognitive_type": "episodic",
        "created": "2025-01-08T00:00:00.000Z", "last_accessed": "2025-01-08T00:00:00.000Z",
        "access_count": 0, "recall_history": [], "strength": 0.8, "decay_rate": 0.98505,
        "salience": 0.96, "confidence": 0.79, "tags": ["n+1", "performance"], "related": [],
        "source": "", "encoding_context": {"project": "", "topics": ["latency"],
                                            "task_type": "reviewing", "agent": "fixture"},
    }
    fields.update(overrides)
    return fields


def test_layout_matches_the_format_example() -> None:
    text = render_memory_file(_fields(), "The content.")
    assert text == (
        "---\nid: mem_20250108_032187\ntype: learning\ncognitive_type: episodic\n"
        'created: "2025-01-08T00:00:00.000Z"\nlast_accessed: "2025-01-08T00:00:00.000Z"\n'
        "access_count: 0\nrecall_history: []\nstrength: 0.8\ndecay_rate: 0.98505\n"
        'salience: 0.96\nconfidence: 0.79\ntags: ["n+1", "performance"]\nrelated: []\n'
        'source: ""\nencoding_context:\n  project: ""\n  topics: ["latency"]\n'
        '  task_type: "reviewing"\n  agent: "fixture"\n---\nThe content.\n'
    )


def test_optional_lines_go_where_the_command_line_puts_them() -> None:
    text = render_memory_file(
        _fields(pinned=True, pin_scope="global", pin_priority=0, stable=True, origin="user",
                quarantined=True, quarantine_reasons=["origin:external"],
                quarantine_flagged="2025-01-08T00:00:00.000Z", supersedes=["mem_20250101_aaaaaa"],
                valid_from="2025-01-01T00:00:00.000Z", valid_until="2026-01-01T00:00:00.000Z"),
        "body",
    )
    keys = [line.split(":")[0] for line in frontmatter_text(text).split("\n") if not line.startswith(" ")]
    assert keys == [
        "id", "type", "cognitive_type", "created", "last_accessed", "access_count", "recall_history",
        "strength", "decay_rate", "salience", "confidence", "pinned", "pin_scope", "pin_priority",
        "stable", "quarantined", "quarantine_reasons", "quarantine_flagged", "supersedes",
        "valid_from", "valid_until", "tags", "related", "origin", "source", "encoding_context",
    ]


@pytest.mark.parametrize("brain", fixture_brains(), ids=lambda path: path.name)
def test_fixture_files_are_reproduced_byte_for_byte(brain) -> None:  # type: ignore[no-untyped-def]
    """Every fixture memory not pinned after its creation renders exactly as the CLI wrote it."""
    memories = json.loads((brain / "index.json").read_text())["memories"]
    compared = 0
    for memory_id, entry in memories.items():
        text = (brain / entry["path"]).read_text(encoding="utf-8")
        if entry.get("pinned"):
            continue  # pinned later by `brain pin`: its lines were appended at the end
        content = text.split("\n---\n", 1)[1][:-1]
        fields = {**entry, "id": memory_id, "recall_history": [], "source": ""}
        assert render_memory_file(fields, content) == text, entry["path"]
        compared += 1
    assert compared > 0


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1.0, "1"), (0.98505, "0.98505"), (0.1, "0.1"), (0, "0"), (7, "7"), (-0.5, "-0.5"),
     (0.000001, "0.000001"), (1e-7, "1.0e-7"), (1.5e-7, "1.5e-7"), (1e21, "1.0e+21"),
     (123456789012345680000.0, "123456789012345680000"), (0.99 * 0.995, "0.98505")],
)
def test_numbers_print_like_javascript(value: float, expected: str) -> None:
    assert js_number(value) == expected
    assert float(yaml.safe_load(f"v: {expected}")["v"]) == value


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_any_finite_number_reads_back_as_the_same_number(value: float) -> None:
    assert float(yaml.safe_load(f"v: {js_number(value)}")["v"]) == value


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=200))
def test_any_string_reads_back_exactly_as_yaml_and_json(value: str) -> None:
    written = yaml_string(value)
    assert "\n" not in written and "---" not in written
    assert yaml.safe_load(f"key: {written}")["key"] == value
    assert json.loads(written) == value


@settings(max_examples=200, deadline=None)
@given(
    tags=st.lists(any_text, max_size=5),
    source=any_text,
    project=any_text,
    topics=st.lists(any_text, max_size=4),
    task=any_text,
    agent=any_text,
    content=st.text(min_size=1, max_size=300),
)
def test_whole_file_parses_back_to_exactly_the_values_written(
    tags: list[str], source: str, project: str, topics: list[str], task: str, agent: str, content: str
) -> None:
    context = {"project": project, "topics": topics, "task_type": task, "agent": agent}
    text = render_memory_file(
        _fields(tags=tags, source=source, encoding_context=context, origin="agent-inferred",
                valid_from="2025-01-01T00:00:00.000Z"),
        content,
    )
    parsed = yaml.safe_load(frontmatter_text(text))
    assert parsed["tags"] == tags
    assert parsed["source"] == source
    assert parsed["encoding_context"] == context
    assert parsed["origin"] == "agent-inferred"
    assert parsed["id"] == "mem_20250108_032187"
    assert parsed["decay_rate"] == 0.98505 and parsed["access_count"] == 0
    assert parsed["created"] == "2025-01-08T00:00:00.000Z"
    # The body a reader sees is exactly the content (recall trims it).
    assert text.endswith("\n---\n" + content + "\n")
    assert memory_body(text) == js_trim(content + "\n")


SAMPLE = render_memory_file(_fields(), "Body line\n---\nnot frontmatter: true")


def test_edit_replaces_in_place_appends_and_removes() -> None:
    edited = edit_frontmatter(SAMPLE, {"salience": 0.5, "pinned": True, "pin_scope": "global"})
    lines = frontmatter_text(edited).split("\n")
    assert lines[9] == "salience: 0.5"
    assert lines[-2:] == ["pinned: true", 'pin_scope: "global"']
    assert edited.endswith("---\nBody line\n---\nnot frontmatter: true\n")
    removed = edit_frontmatter(edited, remove=("pinned", "encoding_context", "tags"))
    parsed = yaml.safe_load(frontmatter_text(removed))
    assert "pinned" not in parsed and "encoding_context" not in parsed and "tags" not in parsed
    assert parsed["pin_scope"] == "global"
    assert removed.endswith("---\nBody line\n---\nnot frontmatter: true\n")


def test_edit_replaces_a_nested_block_and_leaves_files_without_frontmatter() -> None:
    edited = edit_frontmatter(SAMPLE, {"encoding_context": "flat"})
    assert yaml.safe_load(frontmatter_text(edited))["encoding_context"] == "flat"
    assert "  project" not in edited
    assert edit_frontmatter("no frontmatter here\n", {"pinned": True}) == "no frontmatter here\n"


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["pinned", "pin_scope", "vetted_at", "note", "salience"]),
                       st.one_of(st.booleans(), any_text, st.integers(-5, 5)), max_size=4))
def test_edits_with_any_value_stay_valid_yaml(updates: dict[str, object]) -> None:
    edited = edit_frontmatter(SAMPLE, updates)
    parsed = yaml.safe_load(frontmatter_text(edited))
    for key, value in updates.items():
        assert parsed[key] == value
    assert parsed["tags"] == ["n+1", "performance"]
    assert edited.split("\n---\n", 1)[1] == SAMPLE.split("\n---\n", 1)[1]
