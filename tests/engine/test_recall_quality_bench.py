"""bench/recall_quality.py scores modes on a set laid out like shared/fixtures/recall-quality."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.engine.conftest import REPO_ROOT
from tests.engine.hybrid_support import make_brain, write_brain


def test_scores_both_modes_beside_the_reference(tmp_path: Path) -> None:
    brain, ids = make_brain()
    write_brain(brain, tmp_path / "brain")
    now = "2026-03-01T12:00:00.000Z"
    queries = [
        {"id": "t-exact-01", "query": "webhook relay retries", "category": "exact", "lang": "en",
         "gold": [ids["Webhook relay"]], "reference_top5": [ids["Webhook relay"]],
         "reference_top10": [ids["Webhook relay"]], "now": now},
        {"id": "t-cjk-01", "query": "疫苗", "category": "cjk", "lang": "zh", "gold": [ids["猫的疫苗"]],
         "reference_top5": [], "reference_top10": [], "now": now},
    ]
    queries += [
        {"id": "t-synonym-01", "query": "when does my cat get vaccinated", "category": "crosslingual", "lang": "en",
         "gold": [ids["猫的疫苗"]], "reference_top5": [], "reference_top10": [], "now": now},
        {"id": "t-typo-01", "query": "kubernetse clustr", "category": "typo_diacritics", "lang": "en",
         "gold": [ids["Cluster upgrade"]], "reference_top5": [], "reference_top10": [], "now": now},
    ]
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(q, ensure_ascii=False) for q in queries) + "\n")
    # No-answer queries in two files: --no-answer joins them.
    no_answer, more = tmp_path / "no_answer.json", tmp_path / "no_answer_more.json"
    no_answer.write_text(json.dumps({"now": now, "queries": [
        {"id": "na-en-01", "query": "saxophone lessons", "lang": "en", "kind": "far"},
        {"id": "na-zh-01", "query": "学习萨克斯", "lang": "zh", "kind": "far"},
    ]}, ensure_ascii=False))
    more.write_text(json.dumps({"now": now, "queries": [
        {"id": "na-ja-01", "query": "サックスの練習", "lang": "ja", "kind": "far"},
    ]}, ensure_ascii=False))
    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "recall_quality.py"), str(tmp_path), "--json", str(out),
         "--no-answer", str(no_answer), "--no-answer", str(more), "--cv"],
        capture_output=True, text=True, timeout=300, check=False, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["reference"]["overall"]["recall@5"] == 0.25
    assert report["exact"]["cjk"]["recall@5"] == 0.0 and report["exact"]["exact"]["mrr@10"] == 1.0
    assert report["hybrid"]["overall"]["recall@5"] == 1.0
    assert "cjk" in done.stdout and "overall" in done.stdout
    # The embedding alone and the fusion without its floor are scored beside hybrid, per category.
    assert report["embedding"]["cjk"]["recall@5"] == 1.0 and "overall" in report["hybrid-nofloor"]
    assert "embedding r@5" in done.stdout and "hybrid-nofloor r@5" in done.stdout
    # No-answer queries: the floor returns nothing for them; the embedding alone returns ten memories each.
    assert report["hybrid"]["no-answer"]["all"] == {"queries": 3, "empty": 1.0, "mean_hits": 0.0}
    assert report["embedding"]["no-answer"]["all"]["mean_hits"] == min(10, len(ids))
    assert report["hybrid"]["no-answer"]["zh"]["queries"] == 1 and report["hybrid"]["no-answer"]["ja"]["queries"] == 1
    assert report["no_answer_sets"] == [str(no_answer), str(more)] and "no-answer queries" in done.stdout
    # Cross-validation: fitted on each half, scored on the other, both directions printed.
    assert [fold["direction"] for fold in report["cv"]] == ["fit odd, score even", "fit even, score odd"]
    assert all("overall" in fold["fitted_on_other_half"] and "floor" in fold["fitted"] for fold in report["cv"])
    assert "cross-validation, fit odd, score even" in done.stdout
