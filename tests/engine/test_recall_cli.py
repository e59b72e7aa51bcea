"""`brain-connector recall` as a real process, on fixture brains (directory and archive)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from connector.engine.format.archive import load_directory, pack_archive
from tests.engine.conftest import parity_dir
from tests.engine.test_recall_parity import same_json
from tests.support.processes import console_script


def _first_cases(count: int) -> list[dict]:
    cases_file = parity_dir() / "cases.jsonl"
    if not cases_file.is_file():
        pytest.skip("no recall-parity fixtures")
    cases = [json.loads(line) for line in cases_file.read_text().splitlines() if line.strip()]
    query_case = next(c for c in cases if "query" in c["args"] and c["expected"] and "topics" in c["args"])
    context_case = next(c for c in cases if c["args"].get("context"))
    return [query_case, context_case][:count]


def _command(brain: Path, case: dict) -> list[str]:
    args = case["args"]
    command = [console_script("brain-connector"), "recall", str(brain)]
    if "query" in args:
        command.append(args["query"])
    command += ["--top", str(args.get("top", 10)), "--now", case["now"]]
    for key in ("project", "task", "topics"):
        if key in args:
            command += [f"--{key}", args[key]]
    if args.get("context"):
        command.append("--context")
    return command


def test_cli_matches_reference(tmp_path: Path) -> None:
    for case in _first_cases(2):
        brain_dir = parity_dir() / "brains" / case["brain"]
        archive = tmp_path / f"{case['brain']}.tar.gz"
        archive.write_bytes(pack_archive(load_directory(brain_dir)))
        for brain in (brain_dir, archive):
            done = subprocess.run(_command(brain, case), capture_output=True, timeout=60, check=False)
            assert done.returncode == 0, done.stderr
            assert same_json(json.loads(done.stdout), case["expected"])
            # The reference prints integral numbers without ".0" and indents by two.
            assert b".0," not in done.stdout and done.stdout.startswith(b"[\n  {\n    \"id\"")


def test_cli_uninitialized_brain(tmp_path: Path) -> None:
    done = subprocess.run(
        [console_script("brain-connector"), "recall", str(tmp_path), "anything"], capture_output=True, timeout=60, check=False
    )
    assert done.returncode != 0
    # What is missing and what to give instead, not only "brain not initialized".
    assert f"brain not initialized: {tmp_path} has no index.json".encode() in done.stderr
    assert b"not a brain directory" in done.stderr and b".tar.gz" in done.stderr
    assert b"Traceback" not in done.stderr


def test_cli_bad_archive(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.tar.gz"
    bogus.write_bytes(b"nope")
    done = subprocess.run(
        [console_script("brain-connector"), "recall", str(bogus), "x"], capture_output=True, timeout=60, check=False
    )
    assert done.returncode != 0 and b"tar.gz" in done.stderr and b"Traceback" not in done.stderr


def test_cli_mode_hybrid_finds_chinese_and_exact_stays_the_default(tmp_path: Path) -> None:
    from tests.engine.hybrid_support import make_brain

    brain, ids = make_brain()
    brain_dir = tmp_path / "brain"
    for path, data in brain.files.items():
        (brain_dir / path).parent.mkdir(parents=True, exist_ok=True)
        (brain_dir / path).write_bytes(data)
    # PYTHONPATH kept: the command runs the code under test when that is not the installed copy.
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
           **{name: value for name, value in os.environ.items() if name == "PYTHONPATH"}}

    def run(*extra: str) -> subprocess.CompletedProcess[bytes]:
        command = [console_script("brain-connector"), "recall", str(brain_dir), "疫苗", "--top", "3", *extra]
        return subprocess.run(command, capture_output=True, timeout=120, check=False, env=env)

    hybrid = run("--mode", "hybrid")
    assert hybrid.returncode == 0, hybrid.stderr
    hits = json.loads(hybrid.stdout)
    assert hits[0]["id"] == ids["猫的疫苗"] and "score" in hits[0]
    for exact in (run(), run("--mode", "exact")):
        assert exact.returncode == 0 and json.loads(exact.stdout) == []
        # ... and says why, and what works (an empty [] alone read as "nothing about this").
        assert b"cannot search Chinese or Japanese text; --mode hybrid" in exact.stderr
    wrong = run("--mode", "fuzzy")
    assert wrong.returncode != 0 and b"'fuzzy' is not one of" in wrong.stderr and b"Traceback" not in wrong.stderr


def test_cli_top_below_one_is_refused_not_answered_empty(tmp_path: Path) -> None:
    """``--top 0`` printed [] as if nothing matched."""
    for top in ("0", "-3"):
        done = subprocess.run([console_script("brain-connector"), "recall", str(tmp_path), "anything", "--top", top],
                              capture_output=True, timeout=60, check=False)
        assert done.returncode == 2 and b"--top" in done.stderr and not done.stdout
