"""bench/similar_bench.py scores a set laid out like shared/fixtures/memory-governance."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from connector.engine.format.archive import save_directory
from tests.engine.conftest import REPO_ROOT
from tests.engine.similar_support import governance_brain

ITEMS = [
    {"id": "t-duplicate-01", "label": "duplicate", "kind": "translation", "lang": "zh", "target_lang": "en",
     "title": "工作电脑", "content": "我的工作电脑是ThinkPad X1 Carbon，32GB内存，装的是Ubuntu 24.04。",
     "type": "learning", "tags": ["电脑"], "target": ["Work laptop"]},
    {"id": "t-update-01", "label": "update", "kind": "value-change", "lang": "en", "target_lang": "en",
     "title": "Dentist appointment moved", "type": "learning", "tags": ["health"], "target": ["Dentist appointment"],
     "content": "The dentist appointment is on 21 May at 3 pm at the clinic near Ikebukuro station."},
    {"id": "t-related-01", "label": "related", "kind": "hard-negative", "lang": "en", "near_lang": "en",
     "title": "Climbing gym", "content": "The bouldering gym in Ogikubo is closed on Wednesdays and has a chalk ban.",
     "type": "learning", "tags": ["climbing"], "target": []},
    {"id": "t-unrelated-01", "label": "unrelated", "kind": "new-topic", "lang": "ja", "title": "ドラマ",
     "content": "最近は韓国のドラマをよく見ている。", "type": "learning", "tags": ["ドラマ"], "target": []},
]


def write_set(root: Path) -> None:
    brain, ids = governance_brain()
    save_directory(brain, root / "brains" / "one")
    (root / "set").mkdir()
    (root / "set" / "set.json").write_text(json.dumps({"brain": "../brains/one"}))
    lines = [json.dumps({**item, "target": [ids[title] for title in item["target"]]}, ensure_ascii=False)
             for item in ITEMS]
    (root / "set" / "incoming.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_bench(root: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = root / "report.json"
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "similar_bench.py"), str(root / "set"), "--json", str(out), *args],
        capture_output=True, text=True, timeout=600, check=False, env={"HOME": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return done, json.loads(out.read_text())


def test_in_process_and_command_modes_score_alike(tmp_path: Path) -> None:
    write_set(tmp_path)
    done, report = run_bench(tmp_path, "--in-process")
    overall = report["metrics"]["overall"]
    assert overall["n"] == 4 and overall["errors"] == 0
    assert overall["dup_flag_recall"] == 1.0 and overall["update_flag_recall"] == 1.0
    assert overall["false_flags_unrelated"] == 0.0 and overall["false_flags_related"] == 0.0
    assert overall["right_relation"] == 1.0 and overall["strict"] == 1.0
    assert report["metrics"]["cross-lingual"]["dup_flag_recall"] == 1.0
    assert set(report["metrics"]) >= {"overall", "en", "zh", "ja", "same-language", "cross-lingual", "kind:translation"}
    assert "| overall | 4 |" in done.stdout and "false flags related" in done.stdout
    # The command, once per item on a fresh copy of the brain: the same figures.
    _, by_command = run_bench(tmp_path, "--command", json.dumps([
        str(Path(sys.executable).with_name("brain-connector")), "similar", "{brain}",
        "--content-file", "{content_file}", "--title", "{title}",
    ]))
    assert by_command["metrics"] == report["metrics"]
    # A command that fails or prints another shape counts as an error, scored as nothing flagged.
    _, broken = run_bench(tmp_path, "--command", json.dumps(["/bin/echo", "{\"similar\": 3}"]))
    assert broken["metrics"]["overall"]["errors"] == 4 and broken["metrics"]["overall"]["dup_flag_recall"] == 0.0


def test_scoring_follows_the_readme() -> None:
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    from similar_bench import judge, metrics  # type: ignore[import-not-found]

    item = {"label": "update", "target": ["a", "b"]}
    right = judge(item, [{"id": "b", "relation": "update", "score": 0.9}, {"id": "c", "relation": "related", "score": 0.5}])
    assert right["hit"] and right["right"] and right["strict"]
    extra = judge(item, [{"id": "a", "relation": "update", "score": 0.9}, {"id": "c", "relation": "duplicate", "score": 0.5}])
    assert extra["hit"] and not extra["strict"]
    wrong = judge(item, [{"id": "a", "relation": "duplicate", "score": 0.9}])
    assert wrong["hit"] and not wrong["right"]
    negative = judge({"label": "related", "target": []}, [{"id": "c", "relation": "related", "score": 0.8}])
    assert negative["strict"] and not negative["any_flag"]
    table = metrics([right, extra, wrong, negative, judge({"label": "unrelated", "target": []}, None)])
    assert table["update_flag_recall"] == 1.0 and table["errors"] == 1
    assert abs(table["right_relation"] - 2 / 3) < 1e-9 and table["precision"] == 3 / 4


def test_held_out_figures_of_the_half_splits() -> None:
    # bench/similar_fit.py's columns for the random half splits: duplicates, updates, relation,
    # false flags on related + unrelated items together, and cross-lingual duplicates alone.
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    from similar_bench import judge  # type: ignore[import-not-found]
    from similar_fit import held_out_figures  # type: ignore[import-not-found]

    items = [
        {"label": "duplicate", "lang": "en", "target_lang": "zh", "kind": "translation", "target": ["a"]},
        {"label": "duplicate", "lang": "en", "target_lang": "en", "kind": "paraphrase", "target": ["b"]},
        {"label": "update", "lang": "ja", "target_lang": "ja", "kind": "negation", "target": ["c"]},
        {"label": "related", "lang": "en", "near_lang": "en", "kind": "hard-negative", "target": []},
        {"label": "unrelated", "lang": "zh", "kind": "new-topic", "target": []},
    ]
    answers = [
        [{"id": "a", "relation": "related", "score": 0.5}],  # the cross-lingual duplicate missed
        [{"id": "b", "relation": "duplicate", "score": 0.9}],
        [{"id": "c", "relation": "duplicate", "score": 0.7}],  # flagged, the wrong relation
        [{"id": "d", "relation": "update", "score": 0.6}],  # a false flag
        [],
    ]
    outcomes = [judge(item, answer) for item, answer in zip(items, answers, strict=True)]
    assert held_out_figures(items, outcomes).tolist() == [0.5, 1.0, 0.5, 0.5, 0.0]
