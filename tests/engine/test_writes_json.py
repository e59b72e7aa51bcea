"""JSON written by writes: byte-identical to `dump_json`, only faster; strict parsing."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from connector.engine.format.brain import Brain, dump_json
from connector.engine.writes.txn import WriteTxn, fast_dump_json, maybe_special_float
from tests.engine.writes_support import require_fixtures, NOW, fixture_brain

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
@example(1e-05)
@example([1e-7, 1e16, -0.0, 1.0, 123.0, 0.001, 1e15, 2.5e-4])
@example({"w": 0.28, "n": 10**30})
def test_fast_dump_is_byte_identical_to_dump_json(value: object) -> None:
    assert fast_dump_json(value) == dump_json(value)


def _floats(value: object) -> list[float]:
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        return [item for child in value.values() for item in _floats(child)]
    if isinstance(value, list):
        return [item for child in value for item in _floats(child)]
    return []


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_plain_float_shortcut_is_exact_whenever_it_is_taken(value: object) -> None:
    """Documents whose floats are all 'plain' skip the float scan; that must change nothing."""
    if not any(maybe_special_float(number) for number in _floats(value)):
        assert fast_dump_json(value, plain_floats=True) == dump_json(value)


def test_fast_dump_matches_on_every_fixture_json_file() -> None:
    require_fixtures()
    brain = fixture_brain("brain-1-01")
    for path in brain:
        if path.endswith(".json"):
            value = brain.read_json(path)
            assert fast_dump_json(value) == dump_json(value) == brain.read(path), path


def test_non_strict_json_reads_as_unusable() -> None:
    brain = Brain({"associations.json": b'{"version": 1, "edges": {"a": {"b": {"weight": NaN}}}}'})
    txn = WriteTxn(brain, NOW)
    assert txn.edges() == {}, "NaN is not JSON (JavaScript refuses it), so the file reads as absent"
