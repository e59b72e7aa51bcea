"""`brain-connector memorize|pin|unpin|forget|restore|verify` on a brain directory."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.connector import main
from connector.engine.format.archive import load_directory
from tests.engine.writes_support import check_consistency, fixture_path, memory, require_fixtures
from tests.support.processes import console_script

require_fixtures()

NOW = "2026-03-01T12:00:00.123Z"


@pytest.fixture
def brain_dir(tmp_path: Path) -> Path:
    target = tmp_path / "brain"
    shutil.copytree(fixture_path("brain-1-01"), target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)  # fixtures are read-only
    return target


def run(*args: str, stdin: str | None = None) -> tuple[int, object, str]:
    result = CliRunner().invoke(main, list(args), input=stdin)
    stdout = result.stdout
    return result.exit_code, json.loads(stdout) if stdout.strip() else None, result.stderr


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(path.relative_to(directory)): path.read_bytes() for path in directory.rglob("*") if path.is_file()}


def test_memorize_from_stdin_in_every_shape(brain_dir: Path) -> None:
    code, result, _ = run("memorize", str(brain_dir), "--now", NOW, stdin=json.dumps(memory("One", tags=["x"])))
    assert code == 0 and result["count"] == 1
    stored = result["stored"][0]
    assert (brain_dir / stored["path"]).read_text().endswith("One content\n")
    code, result, _ = run("memorize", str(brain_dir), "--now", NOW, stdin=json.dumps([memory("Two"), memory("Three")]))
    assert code == 0 and [item["title"] for item in result["stored"]] == ["Two", "Three"]
    code, result, _ = run("memorize", str(brain_dir), "--now", NOW, stdin=json.dumps({"memories": [memory("Four")]}))
    assert code == 0 and result["stored"][0]["id"].startswith("mem_20260301_")
    brain = load_directory(brain_dir)
    check_consistency(brain)
    assert brain.read_json("index.json")["last_updated"] == NOW


def test_recall_finds_what_the_cli_memorized(brain_dir: Path) -> None:
    payload = memory("Narwhal tusks", content="Narwhal tusks are teeth.", tags=["sea"])
    _, result, _ = run("memorize", str(brain_dir), "--now", NOW, stdin=json.dumps(payload))
    code, hits, _ = run("recall", str(brain_dir), "narwhal tusks", "--now", NOW)
    assert code == 0 and hits[0]["id"] == result["stored"][0]["id"]


def test_bad_input_exits_1_with_a_json_error_and_writes_nothing(brain_dir: Path) -> None:
    before = snapshot(brain_dir)
    for stdin in ("not json", json.dumps(memory(type="nope")), json.dumps(memory(path="../x.md")), "[]"):
        code, result, stderr = run("memorize", str(brain_dir), stdin=stdin)
        assert code == 1 and result is None
        assert "error" in json.loads(stderr.strip().splitlines()[-1])
    for args in (["pin", str(brain_dir), "mem_20990101_000000"], ["forget", str(brain_dir), "mem_20990101_000000"],
                 ["unpin", str(brain_dir), "mem_20990101_000000"]):
        code, _, stderr = run(*args)
        assert code == 1 and "unknown memory id" in stderr
    assert snapshot(brain_dir) == before


def test_pin_unpin_forget_verify(brain_dir: Path) -> None:
    _, result, _ = run("memorize", str(brain_dir), "--now", NOW,
                       stdin=json.dumps([memory("Keep", salience=0.9, origin="user"), memory("Held", origin="tool-output")]))
    keep, held = (item["id"] for item in result["stored"])
    code, result, _ = run("pin", str(brain_dir), keep, "--scope", "project", "--priority", "2", "--now", NOW)
    assert code == 0 and result["pinned"] is True and result["scope"] == "project"
    pins = json.loads((brain_dir / "pinned.json").read_text())["pins"]
    assert pins[-1]["id"] == keep
    code, result, _ = run("unpin", str(brain_dir), keep)
    assert code == 0 and result["was_pinned"] is True
    code, _, stderr = run("forget", str(brain_dir), keep)
    assert code == 1 and "force" in stderr
    code, result, _ = run("forget", str(brain_dir), keep, "--force", "--now", NOW)
    assert code == 0 and (brain_dir / result["archived_path"]).is_file()
    code, result, _ = run("verify", str(brain_dir))
    assert code == 0 and [item["id"] for item in result["pending"]] == [held]
    code, result, _ = run("verify", str(brain_dir), "approve", held, "mem_20990101_000000", "--now", NOW)
    assert code == 0 and [item["id"] for item in result["results"]] == [held] and len(result["errors"]) == 1
    before = snapshot(brain_dir)
    code, result, _ = run("verify", str(brain_dir), "reject", "mem_20990101_000000", held, "--now", NOW)
    assert code == 1 and result["results"] == [] and len(result["errors"]) == 2  # none could be done: not a success
    assert snapshot(brain_dir) == before
    check_consistency(load_directory(brain_dir))


def test_memorize_creates_a_new_brain_and_other_commands_need_one(tmp_path: Path) -> None:
    target = tmp_path / "fresh"
    code, result, _ = run("memorize", str(target), "--now", NOW, stdin=json.dumps(memory("Hello")))
    assert code == 0 and (target / "index.json").is_file()
    code, _, stderr = run("pin", str(tmp_path / "absent"), "mem_20990101_000000")
    assert code == 1 and "not initialized" in stderr


def test_device_sync_state_and_unknown_files_are_left_alone(brain_dir: Path) -> None:
    (brain_dir / ".sync").mkdir()
    (brain_dir / ".sync" / "state").write_text("device")
    (brain_dir / "notes.txt").write_text("mine")
    run("memorize", str(brain_dir), "--now", NOW, stdin=json.dumps(memory("x")))
    assert (brain_dir / ".sync" / "state").read_text() == "device"
    assert (brain_dir / "notes.txt").read_text() == "mine"


def test_pinning_a_forgotten_memory_says_the_command_line_s_way_to_restore_it(brain_dir: Path) -> None:
    """`pin` of an archived memory told the person to restore it "from its page in the web app", which
    a brain directory has not; it names `brain-connector restore`, which brings it back (same id)."""
    _, result, _ = run("memorize", str(brain_dir), "--now", NOW, stdin=json.dumps(memory("Gone", origin="user")))
    gone = result["stored"][0]["id"]
    assert run("forget", str(brain_dir), gone, "--now", NOW)[0] == 0
    before = snapshot(brain_dir)
    for command in ("pin", "unpin"):  # forget of it says it was archived already (exit 0)
        code, _, stderr = run(command, str(brain_dir), gone)
        assert code == 1 and json.loads(stderr) == {"error": (
            f"{gone} is archived (forgotten), not a live memory; restore it first: "
            f"brain-connector restore {brain_dir} {gone}")}, stderr
    assert snapshot(brain_dir) == before
    code, result, _ = run("restore", str(brain_dir), gone, "--now", NOW)
    assert code == 0 and result["restored"] is True and result["id"] == gone
    code, result, _ = run("pin", str(brain_dir), gone, "--now", NOW)
    assert code == 0 and result["pinned"] is True
    check_consistency(load_directory(brain_dir))
    code, _, stderr = run("restore", str(brain_dir), "mem_20990101_000000")
    assert code == 1 and "mem_20990101_000000 is not in the archive" in stderr


def test_help_documents_the_commands() -> None:
    for command in ("memorize", "pin", "unpin", "forget", "restore", "verify"):
        result = CliRunner().invoke(main, [command, "--help"])
        assert result.exit_code == 0 and "BRAIN" in result.output


def test_console_script_round_trip(brain_dir: Path) -> None:
    """The installed `brain-connector` command, as a real process."""
    completed = subprocess.run(
        [console_script("brain-connector"), "memorize", str(brain_dir), "--now", NOW],
        input=json.dumps(memory("Process")).encode(), capture_output=True, timeout=60, check=False,
    )
    assert completed.returncode == 0, completed.stderr
    stored = json.loads(completed.stdout)["stored"][0]
    assert (brain_dir / stored["path"]).is_file()


def test_memorize_refuses_credentials_in_any_field_unless_allowed(tmp_path: Path) -> None:
    """Issue 24 item 7: the command line runs the same credential check as the MCP tool and the web app."""
    key = "bsk_" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7cDE0fGHi"
    brain_dir = tmp_path / "brain"
    code, _, _ = run("memorize", str(brain_dir), "--now", NOW, stdin=json.dumps(memory("First")))
    assert code == 0
    before = snapshot(brain_dir)
    for payload in (memory("Agent key", content=f"ci uses {key}"), memory("Tagged", tags=["AKIAIOSFODNN7EXAMPLE"]),
                    {**memory("Context"), "encoding_context": {"project": key}}):
        code, result, err = run("memorize", str(brain_dir), "--now", NOW, stdin=json.dumps(payload))
        assert code == 1 and result is None and "looks like it contains a credential" in err and key not in err
    assert snapshot(brain_dir) == before
    code, result, _ = run("memorize", str(brain_dir), "--now", NOW, "--allow-secrets",
                          stdin=json.dumps(memory("Agent key", content=f"ci uses {key}")))
    assert code == 0 and result["count"] == 1
