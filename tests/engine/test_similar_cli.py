"""`brain-connector similar` and the similar memories `brain-connector memorize` prints."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.connector import main
from connector.engine.format.archive import pack_archive, save_directory
from tests.engine.similar_support import MEMORIES, governance_brain
from tests.support.processes import console_script

UPDATE = "The dentist appointment is on 21 May at 3 pm at the clinic near Ikebukuro station."


@pytest.fixture
def brain_dir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    brain, ids = governance_brain()
    save_directory(brain, tmp_path / "brain")
    (tmp_path / "brain.tar.gz").write_bytes(pack_archive(brain))
    return tmp_path / "brain", ids


def files_of(directory: Path) -> dict[str, bytes]:
    return {str(path.relative_to(directory)): path.read_bytes() for path in directory.rglob("*") if path.is_file()}


def test_similar_prints_the_flags_as_json_and_writes_nothing(brain_dir, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    directory, ids = brain_dir
    content = tmp_path / "content.txt"
    content.write_text(UPDATE, encoding="utf-8")
    before = files_of(directory)
    # A fresh process, as the benchmark and acceptance run it, on the directory and on the archive.
    for target in (directory, tmp_path / "brain.tar.gz"):
        done = subprocess.run(
            [console_script("brain-connector"), "similar", str(target), "--content-file", str(content),
             "--title", "Dentist appointment moved", "--now", "2026-03-01T12:00:00Z"],
            capture_output=True, timeout=120, check=False, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        )
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        assert list(answer) == ["similar"]
        first = answer["similar"][0]
        assert set(first) == {"id", "relation", "score"} and first["id"] == ids["Dentist appointment"]
        assert first["relation"] == "update" and 0 < first["score"] <= 1
        assert all(set(entry) == {"id", "relation", "score"} for entry in answer["similar"])
        flags = [entry for entry in answer["similar"] if entry["relation"] != "related"]
        assert [entry["score"] for entry in flags] == sorted((entry["score"] for entry in flags), reverse=True)
    assert files_of(directory) == before


def test_similar_refuses_bad_input_clearly(brain_dir, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    directory, _ = brain_dir
    runner = CliRunner()
    binary = tmp_path / "binary.bin"
    binary.write_bytes(b"\xff\xfe\x00bad")
    result = runner.invoke(main, ["similar", str(directory), "--content-file", str(binary)])
    assert result.exit_code == 1 and "not UTF-8" in result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    text = tmp_path / "text.txt"
    text.write_text("anything", encoding="utf-8")
    result = runner.invoke(main, ["similar", str(empty), "--content-file", str(text)])
    assert result.exit_code == 1 and "brain not initialized" in result.stderr
    result = runner.invoke(main, ["similar", str(directory), "--content-file", str(text), "--now", "yesterday"])
    assert result.exit_code == 2 and "ISO 8601" in result.stderr
    result = runner.invoke(main, ["similar", str(directory)])
    assert result.exit_code == 2 and "--content-file" in result.stderr
    assert "duplicate" in runner.invoke(main, ["similar", "--help"]).stdout


def test_memorize_lists_similar_memories_of_each_stored_one(brain_dir) -> None:  # type: ignore[no-untyped-def]
    directory, ids = brain_dir
    payload = [
        {"title": "Dentist moved", "type": "learning", "path": "notes/", "content": UPDATE},
        {"title": "Sourdough", "type": "learning", "path": "notes/", "content": MEMORIES[6]["content"]},
    ]
    result = CliRunner().invoke(main, ["memorize", str(directory)], input=json.dumps(payload))
    assert result.exit_code == 0, result.stderr
    moved, baked = json.loads(result.stdout)["stored"]
    assert (moved["similar"][0]["id"], moved["similar"][0]["relation"]) == (ids["Dentist appointment"], "update")
    # The CLI only reports: an exact duplicate is still written (it does what it is told).
    assert baked["similar"][0]["exact"] is True and baked["similar"][0]["id"] == ids["Bread baking"]
    assert baked["id"] not in ids.values() and (directory / baked["path"]).is_file()
    quiet = CliRunner().invoke(main, ["memorize", str(directory), "--no-similar"], input=json.dumps(payload[:1]))
    assert quiet.exit_code == 0 and "similar" not in json.loads(quiet.stdout)["stored"][0]
