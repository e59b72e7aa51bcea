"""bench/recall_quality.py scores modes on a set laid out like shared/fixtures/recall-quality."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.engine.conftest import REPO_ROOT
from tests.engine.hybrid_support import make_brain


def test_scores_both_modes_beside_the_reference(tmp_path: Path) -> None:
    brain, ids = make_brain()
    for path, data in brain.files.items():
        (tmp_path / "brain" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "brain" / path).write_bytes(data)
    now = "2026-03-01T12:00:00.000Z"
    queries = [
        {"id": "t-exact-01", "query": "webhook relay retries", "category": "exact", "lang": "en",
         "gold": [ids["Webhook relay"]], "reference_top5": [ids["Webhook relay"]],
         "reference_top10": [ids["Webhook relay"]], "now": now},
        {"id": "t-cjk-01", "query": "疫苗", "category": "cjk", "lang": "zh", "gold": [ids["猫的疫苗"]],
         "reference_top5": [], "reference_top10": [], "now": now},
    ]
    (tmp_path / "queries.jsonl").write_text("\n".join(json.dumps(q, ensure_ascii=False) for q in queries) + "\n")
    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / "recall_quality.py"), str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=300, check=False, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["reference"]["overall"]["recall@5"] == 0.5
    assert report["exact"]["cjk"]["recall@5"] == 0.0 and report["exact"]["exact"]["mrr@10"] == 1.0
    assert report["hybrid"]["overall"]["recall@5"] == 1.0
    assert "cjk" in done.stdout and "overall" in done.stdout
