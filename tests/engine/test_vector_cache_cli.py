"""`brain-connector recall --mode hybrid` and `similar` keep a brain's vectors between runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from tests.engine.hybrid_support import make_brain
from tests.support.processes import console_script
from tests.support.tools import missing_tool


def _write(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    brain, ids = make_brain()
    brain_dir = tmp_path / "brain"
    for path, data in brain.files.items():
        (brain_dir / path).parent.mkdir(parents=True, exist_ok=True)
        (brain_dir / path).write_bytes(data)
    return brain_dir, ids


def _env(home: Path) -> dict[str, str]:
    """A command's environment: ``home`` as HOME; PYTHONPATH kept, so the command runs the code
    under test when that is not the installed copy."""
    return {"HOME": str(home), "PATH": "/usr/bin:/bin",
            **{name: value for name, value in os.environ.items() if name == "PYTHONPATH"}}


def _segments(cache: Path) -> dict[str, list[str]]:
    return {
        "use": sorted(path.name for path in (cache / "vectors").glob("seg-*.bin")),
        "e5": sorted(path.name for path in (cache / "vectors" / "e5").glob("seg-*.bin")),
    }


def test_a_second_call_on_an_unchanged_brain_embeds_nothing(tmp_path: Path) -> None:
    brain_dir, ids = _write(tmp_path)
    env = _env(tmp_path / "home")

    def recall(*extra: str) -> list[dict]:
        command = [console_script("brain-connector"), "recall", str(brain_dir), "vaccine for my cat", "--mode", "hybrid",
                   "--top", "3", *extra]
        done = subprocess.run(command, capture_output=True, timeout=300, check=False, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    # The default: $XDG_CACHE_HOME/brain-store, else ~/.cache/brain-store.
    default = tmp_path / "home" / ".cache" / "brain-store"
    first = recall()
    assert first[0]["id"] == ids["猫的疫苗"]
    kept = _segments(default)
    assert kept["use"] and kept["e5"], "both models' vectors are kept"
    assert (default / "key").stat().st_mode & 0o777 == 0o600 and default.stat().st_mode & 0o777 == 0o700
    assert recall() == first
    assert _segments(default) == kept, "the second call embedded something"
    # A memory added to the brain: only it is embedded (one new segment per model).
    (brain_dir / "notes").mkdir(exist_ok=True)
    memorize = subprocess.run(
        [console_script("brain-connector"), "memorize", str(brain_dir), "--no-similar", "--now", "2026-03-02T00:00:00.000Z"],
        input=json.dumps([{"title": "Cat food", "content": "The cat eats salmon kibble twice a day.", "type": "learning",
                           "path": "notes/", "tags": ["cat"]}]).encode(),
        capture_output=True, timeout=120, check=False, env=env)
    assert memorize.returncode == 0, memorize.stderr
    recall()
    grown = _segments(default)
    assert len(grown["use"]) == len(kept["use"]) + 1 and len(grown["e5"]) == len(kept["e5"]) + 1
    # --cache-dir: another directory, filled on its first use (XDG_CACHE_HOME moves the default:
    # test_the_default_cache_dir_follows_xdg_cache_home).
    other = tmp_path / "other-cache"
    assert recall("--cache-dir", str(other))[0]["id"] == ids["猫的疫苗"]
    assert _segments(other)["e5"]


def test_the_default_cache_dir_follows_xdg_cache_home(tmp_path: Path) -> None:
    """Without --cache-dir the vectors land in $XDG_CACHE_HOME/brain-store, else (unset, empty, or
    relative: the XDG base directory spec says to ignore it) in ~/.cache/brain-store; a relative one
    put the cache under the working directory."""
    brain_dir, ids = _write(tmp_path)
    content = tmp_path / "content.txt"
    content.write_text("Our cat gets her vaccine at the pet clinic every March.")
    commands = {"recall": [str(brain_dir), "vaccine for my cat", "--mode", "hybrid", "--top", "3"],
                "similar": [str(brain_dir), "--content-file", str(content)]}
    for case, xdg in (("set", "xdg"), ("unset", None), ("empty", ""), ("relative", "xdg")):
        for command, args in commands.items():
            root = tmp_path / case / command
            home, work = root / "home", root / "work"
            work.mkdir(parents=True)
            given = str(root / xdg) if case == "set" else xdg
            env = _env(home) | ({} if given is None else {"XDG_CACHE_HOME": given})
            done = subprocess.run([console_script("brain-connector"), command, *args], cwd=work,
                                  capture_output=True, timeout=300, check=False, env=env)
            assert done.returncode == 0 and done.stderr == b"", (case, command, done.stderr)
            if command == "recall":
                assert json.loads(done.stdout)[0]["id"] == ids["猫的疫苗"]
            expected = (root / "xdg" if case == "set" else home / ".cache") / "brain-store"
            kept = _segments(expected)
            assert kept["use"] and (kept["e5"] or command == "similar"), (case, command)  # similar: USE only
            assert (expected / "key").stat().st_mode & 0o777 == 0o600 and expected.stat().st_mode & 0o777 == 0o700
            # nowhere else: not in ~/.cache beside XDG_CACHE_HOME, not under the working directory
            assert not (home / ".cache").exists() if case == "set" else not (root / "xdg").exists(), (case, command)
            assert list(work.iterdir()) == [], (case, command)


def _as_a_user(command: list[str]) -> list[str]:
    """``command`` run so that file modes bind: root without CAP_DAC_OVERRIDE (setpriv drops
    every capability) writes a read-only directory no more than a user does."""
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        missing_tool("setpriv (util-linux) is not installed")
    return ["setpriv", "--inh-caps=-all", "--bounding-set=-all", *command]


def _read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        path.chmod(0o500 if path.is_dir() else 0o400)


def test_a_read_only_or_unusable_cache_dir_still_answers(tmp_path: Path) -> None:
    """The cache only saves time: a read-only cache directory (a shared, pre-filled one, a
    read-only home) or one that cannot be made ended recall and similar with `cannot use the
    vector cache directory` instead of an answer."""
    brain_dir, ids = _write(tmp_path)
    env = _env(tmp_path / "home")
    content = tmp_path / "content.txt"
    content.write_text("Our cat gets her vaccine at the pet clinic every March.")

    def run(command: str, cache: Path) -> subprocess.CompletedProcess[bytes]:
        args = [str(brain_dir), "vaccine for my cat", "--mode", "hybrid", "--top", "3"] if command == "recall" \
            else [str(brain_dir), "--content-file", str(content)]
        done = subprocess.run(_as_a_user([console_script("brain-connector"), command, *args, "--cache-dir", str(cache)]),
                              capture_output=True, timeout=300, check=False, env=env)
        assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
        return done

    filled = tmp_path / "filled"
    answers = {command: json.loads(run(command, filled).stdout) for command in ("recall", "similar")}
    assert answers["recall"][0]["id"] == ids["猫的疫苗"]
    kept = _segments(filled)
    empty = tmp_path / "empty"
    empty.mkdir()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    _read_only(filled)
    _read_only(empty)
    try:
        for command, answer in answers.items():
            done = run(command, filled)  # read: its vectors serve, nothing to say
            assert json.loads(done.stdout) == answer and done.stderr == b"", done.stderr
            for cache in (empty, blocker / "cache"):
                done = run(command, cache)
                assert json.loads(done.stdout) == answer, (command, cache)
                assert done.stderr.decode().startswith(f"warning: cannot use the vector cache directory {cache}: ")
                assert done.stderr.decode().strip().endswith("; vectors are computed for this run only")
        assert _segments(filled) == kept and list(empty.iterdir()) == []
    finally:
        for path in (filled, empty):
            for entry in [path, *path.rglob("*")]:
                entry.chmod(0o700 if entry.is_dir() else 0o600)


def test_similar_keeps_its_vectors_too(tmp_path: Path) -> None:
    brain_dir, _ = _write(tmp_path)
    content = tmp_path / "content.txt"
    content.write_text("Our cat gets her vaccine at the pet clinic every March.")
    cache = tmp_path / "cache"

    def similar() -> dict:
        done = subprocess.run(
            [console_script("brain-connector"), "similar", str(brain_dir), "--content-file", str(content),
             "--cache-dir", str(cache)],
            capture_output=True, timeout=300, check=False, env=_env(tmp_path))
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    first = similar()
    kept = _segments(cache)
    assert kept["use"]
    assert similar() == first and _segments(cache) == kept


def test_a_damaged_cache_file_is_rebuilt_once_and_then_quiet(tmp_path: Path) -> None:
    """A damaged segment (or key) cost a recomputation, but stayed: every later run said
    `ignoring unreadable vector cache segment` again, for good. It is removed when read."""
    brain_dir, ids = _write(tmp_path)
    cache = tmp_path / "cache"

    def recall() -> tuple[list[dict], str]:
        done = subprocess.run([console_script("brain-connector"), "recall", str(brain_dir), "vaccine for my cat",
                               "--mode", "hybrid", "--top", "3", "--cache-dir", str(cache)],
                              capture_output=True, timeout=300, check=False, env=_env(tmp_path))
        assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
        return json.loads(done.stdout), done.stderr.decode()

    first, said = recall()
    assert first[0]["id"] == ids["猫的疫苗"] and said == ""
    damaged = [cache / "vectors" / _segments(cache)["use"][0], cache / "vectors" / "e5" / _segments(cache)["e5"][0]]
    damaged[0].write_bytes(b"\0" * 50)
    damaged[1].write_bytes(damaged[1].read_bytes()[:-7])  # truncated
    again, said = recall()
    assert again == first
    assert said.count("removed unreadable vector cache segment") == 2, said
    assert not any(path.exists() for path in damaged)
    rebuilt = _segments(cache)
    assert rebuilt["use"] and rebuilt["e5"]
    assert recall() == (first, "")
    assert _segments(cache) == rebuilt, "the third run embedded something"
