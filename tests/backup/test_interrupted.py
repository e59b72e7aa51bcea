"""A backup or migration stopped by SIGTERM (`timeout`, `systemctl stop`, `docker stop`) leaves no
partial file or scratch directory behind, as Ctrl-C already did not."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.backup.support import archive, registry, sealed_brain, tree
from tests.support.processes import REPO_ROOT, console_script

KEY = "44" * 32


def _store_with_a_blocking_archive(data: Path) -> dict[str, str]:
    """A store whose one archive is a named pipe: a copy opening it waits there, mid-way, until stopped."""
    env = {"STORE_DATA_DIR": str(data), "STORE_ENCRYPTION_KEY": KEY}
    user, _ = registry(env).add("alice")
    sealed_brain(data, KEY, user.id, archive({"a.md": b"in transit"}))
    [blob] = data.glob("brains/*/*/blobs/*")
    blob.unlink()
    os.mkfifo(blob)
    return env


def _stop_after(env: dict[str, str], said: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``brain-store ARGS``, wait (bounded) for a line starting with ``said`` on its output,
    then send SIGTERM; what it printed and its exit status."""
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, "STORE_FSYNC": "0", **env}
    process = subprocess.Popen([console_script("brain-store"), *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=full, cwd=REPO_ROOT)
    assert process.stdout is not None
    output = b""
    try:
        # raw reads: a buffered reader could hold the awaited line while select() waits for more
        while not any(line.startswith(said.encode()) for line in output.splitlines()):
            ready, _, _ = select.select([process.stdout], [], [], 60)
            assert ready, f"no output for 60 s: {output!r}"
            chunk = os.read(process.stdout.fileno(), 65536)
            assert chunk and len(output) < 100_000, f"ended before {said!r}: {output!r}"
            output += chunk
        _wait_until_blocked_in_the_pipe(process.pid)
        rest = _terminate(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    return subprocess.CompletedProcess(args, process.returncode, (output + rest).decode())


def _wait_until_blocked_in_the_pipe(pid: int) -> None:
    """Wait (bounded) until ``pid`` sleeps in the named pipe's open().

    A SIGTERM sent a moment earlier, while Python is between its last signal check and that
    system call, is noted but not acted on until the call returns, which it never does here: the
    command then hangs (it did once in CI). Sent while the process sleeps there, it interrupts it."""
    wchan = Path(f"/proc/{pid}/wchan")
    for _ in range(300):
        try:
            if wchan.read_text() in ("wait_for_partner", "0"):
                return  # "0": the kernel hides wait channels here; _terminate's repeated signal covers it
        except OSError:
            return  # ended
        time.sleep(0.1)


def _terminate(process: subprocess.Popen[bytes]) -> bytes:
    """SIGTERM ``process`` and collect the rest of its output. The signal is repeated (bounded)
    while it runs: where /proc shows no wait channel, the first can land in the race above."""
    for _ in range(6):
        process.send_signal(signal.SIGTERM)
        try:
            rest, _ = process.communicate(timeout=10)
            return rest
        except subprocess.TimeoutExpired:
            continue
    raise AssertionError("the command did not end within 60 s of SIGTERM")


def test_a_stopped_backup_leaves_nothing_beside_its_file(tmp_path: Path) -> None:
    env = _store_with_a_blocking_archive(tmp_path / "data")
    out = tmp_path / "backups"
    out.mkdir()
    # "sharing: ..." comes once the partial file and the scratch directory exist, before the archives
    done = _stop_after(env, "sharing:", "backup", "--to", str(out / "nightly.bak"))
    assert done.returncode != 0 and "Traceback" not in done.stdout, done.stdout
    assert sorted(p.name for p in out.iterdir()) == [], "left: nightly.bak.partial and .brain-store-backup-*"


def test_a_stopped_migration_leaves_no_scratch_directory(tmp_path: Path) -> None:
    env = _store_with_a_blocking_archive(tmp_path / "data")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = _stop_after({**env, "TMPDIR": str(scratch)}, "users:", "migrate", "--from", str(tmp_path / "data"),
                       "--to", str(tmp_path / "moved"))
    assert done.returncode != 0 and "Traceback" not in done.stdout, done.stdout
    assert list(scratch.iterdir()) == [], "left: brain-store-migrate-* with the archives in transit"


def _waits_for_a_lock(pid: int) -> bool:
    """True while process ``pid`` is blocked waiting for a file lock (a ``->`` line of /proc/locks)."""
    return any(" -> " in line and f" {pid} " in line for line in Path("/proc/locks").read_text().splitlines())


def _backup_of_two_and_an_empty_store(tmp_path: Path) -> tuple[Path, dict[str, str], tuple[str, str],
                                                                   tuple[str, str]]:
    """A backup of alice's and bob's brains (sealed) and an empty store to restore it into (it had
    a user once); the backup, the store's environment and the two brains' ids in restore order."""
    from store.backup.format import parse_meta_path
    from store.backup.restore import verify_backup

    source = {"STORE_DATA_DIR": str(tmp_path / "data"), "STORE_ENCRYPTION_KEY": KEY}
    users = registry(source)
    for name in ("alice", "bob"):
        sealed_brain(tmp_path / "data", KEY, users.add(name)[0].id, archive({"a.md": f"{name}'s".encode()}))
    backup = tmp_path / "nightly.bak"
    subprocess.run([console_script("brain-store"), "backup", "--to", str(backup)], check=True, capture_output=True,
                   env={**os.environ, "STORE_FSYNC": "0", **source}, cwd=REPO_ROOT, timeout=120)
    [first, second] = [ids for e in verify_backup(backup).manifest.entries if (ids := parse_meta_path(e.path))]
    target = {"STORE_DATA_DIR": str(tmp_path / "restored"), "STORE_ENCRYPTION_KEY": KEY}
    empty = registry(target)
    empty.remove(empty.add("carol")[0].id)
    return backup, target, first, second


def _start_restore(backup: Path, target: dict[str, str]) -> subprocess.Popen[bytes]:
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, "STORE_FSYNC": "0", **target}
    return subprocess.Popen([console_script("brain-store"), "restore", "--from", str(backup)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full, cwd=REPO_ROOT)


def _until(what: str, ready: Callable[[], bool], process: subprocess.Popen[bytes]) -> None:
    """Wait (bounded) until ``ready()``; fails naming ``what`` when the process ends or time runs out."""
    for _ in range(600):
        if ready() or process.poll() is not None:
            break
        time.sleep(0.1)
    assert process.poll() is None and ready(), f"the restore never reached {what}"


def _ended(process: subprocess.Popen[bytes]) -> str:
    """What the process printed, once it ended (bounded: killed after 60 s)."""
    try:
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    return output.decode()


def _as_before(tmp_path: Path, target: dict[str, str], before: dict[str, str]) -> None:
    """The store holds what it held before the restore (and an empty sharing file: absent before)."""
    after = tree(tmp_path / "restored")
    sharing = json.loads((tmp_path / "restored" / "sharing.json").read_bytes())
    assert (sharing["shares"], sharing["keys"]) == ([], [])
    assert {k: v for k, v in after.items() if not k.startswith("sharing.json")} == before
    assert registry(target).users() == []


def test_a_stopped_restore_takes_back_what_it_wrote(tmp_path: Path) -> None:
    """`restore` had no SIGTERM handling: stopped half-way (here with alice's brain restored and bob's
    next), it died where it stood, leaving an "empty" store holding the backup's users, tokens
    working, and some of its brains. Now it takes back what it wrote: the store is as before."""
    from store.storage.local import LocalBackend

    backup, target, _first, second = _backup_of_two_and_an_empty_store(tmp_path)
    before = tree(tmp_path / "restored")
    # the second brain's lock held here: the restore waits there, the first brain and the users written
    with LocalBackend(tmp_path / "restored", fsync=False).brain_lock(*second):
        process = _start_restore(backup, target)
        try:
            _until("the lock", lambda: _waits_for_a_lock(process.pid), process)
            assert len(registry(target).users()) == 2  # half-way: the users were restored
            process.send_signal(signal.SIGTERM)
        except BaseException:
            process.kill()
            raise
    said = _ended(process)
    assert process.returncode != 0 and "Traceback" not in said, said
    assert "restore stopped: nothing restored, the store is empty as before" in said, said
    _as_before(tmp_path, target, before)


def test_a_second_signal_does_not_cut_the_undo_short(tmp_path: Path) -> None:
    """A SIGTERM or Ctrl-C arriving while a stopped restore took back what it wrote stopped that
    too, half-way: the store kept the backup's users (tokens working). Now further signals wait
    for the undo, which finishes; the command then ends as stopped."""
    from store.storage.local import LocalBackend

    backup, target, first, second = _backup_of_two_and_an_empty_store(tmp_path)
    before = tree(tmp_path / "restored")
    first_brain = tmp_path / "restored" / "brains" / first[0] / first[1] / "meta.json"
    # The second brain's lock held throughout: the restore waits there, is stopped, and its undo,
    # having removed the first brain, waits there again (to remove the second) until released.
    with LocalBackend(tmp_path / "restored", fsync=False).brain_lock(*second):
        process = _start_restore(backup, target)
        try:
            _until("the lock", lambda: first_brain.exists() and _waits_for_a_lock(process.pid), process)
            process.send_signal(signal.SIGTERM)
            _until("the lock again, undoing", lambda: not first_brain.exists() and _waits_for_a_lock(process.pid),
                   process)
            assert len(registry(target).users()) == 2  # the undo is under way: the users come last
            process.send_signal(signal.SIGTERM)
            process.send_signal(signal.SIGINT)
        except BaseException:
            process.kill()
            raise
    said = _ended(process)
    _as_before(tmp_path, target, before)
    assert process.returncode != 0 and "Traceback" not in said, said
    assert "taking back what it wrote first" in said, said
    assert "restore stopped: nothing restored, the store is empty as before" in said, said
