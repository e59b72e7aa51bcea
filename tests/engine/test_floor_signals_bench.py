"""bench/floor_signals.py: its pure helpers, and a run over a small set laid out like
shared/fixtures/recall-quality."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.engine.conftest import REPO_ROOT
from tests.engine.hybrid_support import make_brain, write_brain

sys.path.insert(0, str(REPO_ROOT / "bench"))
from floor_signals import cut_tail, leave_one_out  # type: ignore[import-not-found]  # noqa: E402


def test_leave_one_out_drops_each_word_or_cjk_bigram() -> None:
    assert leave_one_out("Kafka consumer lag") == ["consumer lag", "Kafka lag", "Kafka consumer"]
    assert leave_one_out("my brother's graduation") == ["brother's graduation", "my graduation", "my brother's"]
    # A run of Chinese or Japanese characters has no spaces: each bigram is left out in turn.
    assert leave_one_out("哥哥的婚礼") == ["的婚礼", "哥婚礼", "哥哥礼", "哥哥的"]
    # A word mixing scripts: its Latin part, then each bigram of its CJK run.
    assert leave_one_out("Kafka消息积压") == ["消息积压", "Kafka积压", "Kafka消压", "Kafka消息"]
    assert leave_one_out("猫") == [] and leave_one_out("") == []


def test_cut_tail_cuts_the_weak_tail_and_keeps_a_strong_exact_hit() -> None:
    strength = np.array([0.50, 0.48, 0.30, 0.29, 0.10], dtype=np.float32)
    listed = np.array([True, True, True, True, False])
    # The largest gap (0.48 -> 0.30) is at least 0.1: the two after it go.
    assert cut_tail(listed, strength, None, gap=0.1).tolist() == [True, True, False, False, False]
    # A gap under the threshold cuts nothing; no cut asked, nothing cut.
    assert cut_tail(listed, strength, None, gap=0.2).tolist() == listed.tolist()
    assert cut_tail(listed, strength, None).tolist() == listed.tolist()
    assert cut_tail(listed, strength, None, most=1).tolist() == [True, False, False, False, False]
    assert cut_tail(listed, strength, None, ratio=0.9).tolist() == [True, True, False, False, False]
    # The strong exact hit stays listed whatever its strength (fuse lists it always).
    strong = np.array([True, True, True, True, True])
    assert cut_tail(strong, strength, 4, most=1).tolist() == [True, False, False, False, True]


def test_prints_every_candidate_row_for_a_set(tmp_path: Path) -> None:
    brain, ids = make_brain()
    write_brain(brain, tmp_path / "brain")
    now = "2026-03-01T12:00:00.000Z"
    answerable = (("exact", "webhook relay retries", "en", "Webhook relay"), ("cjk", "疫苗", "zh", "猫的疫苗"))
    queries = [{"id": f"t-{category}-01", "query": text, "category": category, "lang": lang, "gold": [ids[title]], "now": now}
               for category, text, lang, title in answerable]
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(q, ensure_ascii=False) for q in queries) + "\n")
    no_answer = tmp_path / "no_answer.json"
    no_answer.write_text(json.dumps({"now": now, "queries": [
        {"id": "na-en-01", "query": "saxophone lessons", "lang": "en", "kind": "far"},
        {"id": "na-ja-01", "query": "サックスの練習", "lang": "ja", "kind": "far"},
    ]}, ensure_ascii=False))
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "floor_signals.py"), str(tmp_path), "--no-answer", str(no_answer),
         "--only", "shipped"],
        capture_output=True, text=True, timeout=300, check=False, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| shipped")]
    assert len(rows) == 1
    # Each direction and the in-sample fit: recall@5 / nothing returned / mean hits / categories below.
    cells = [cell.strip() for cell in rows[0].strip("|").split("|")[1:]]
    assert len(cells) == 3 and all(len(cell.split(" / ")) == 4 for cell in cells)
    # Fitted on all four queries, the floor finds both answers and returns nothing for both strangers.
    assert cells[2] == "1.000 / 100% / 0.00 / none"
