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


def _store_with_a_brain(data: Path) -> dict[str, str]:
    """A store holding alice with one sealed brain."""
    env = {"STORE_DATA_DIR": str(data), "STORE_ENCRYPTION_KEY": KEY}
    user, _ = registry(env).add("alice")
    sealed_brain(data, KEY, user.id, archive({"a.md": b"in transit"}))
    return env


def _full_pipe() -> tuple[int, int]:
    """A pipe (read end, write end) whose buffer is already full: a process writing to it waits
    there, as one whose output nobody reads (a stalled terminal, a log shipper that hangs)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        while os.write(write_end, b"." * 4096):
            pass
    except BlockingIOError:
        pass
    os.set_blocking(write_end, True)
    return read_end, write_end


def _stop_while_it_writes(env: dict[str, str], midway: Callable[[], bool], *args: str) -> tuple[int, str]:
    """Run ``brain-store ARGS`` with its output to a full pipe: its first progress line waits there,
    after it made its partial file and scratch directory (``midway()``: checked). SIGTERM it while
    it waits, then read everything it printed; its exit status and its output after the filling."""
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, "STORE_FSYNC": "0", **env}
    read_end, write_end = _full_pipe()
    process = subprocess.Popen([console_script("brain-store"), *args], stdout=write_end, stderr=write_end,
                               env=full, cwd=REPO_ROOT)
    os.close(write_end)
    try:
        for _ in range(600):
            if process.poll() is not None or (midway() and _sleeps_writing(process.pid)):
                break
            time.sleep(0.1)
        assert process.poll() is None, "it ended before stopping half-way"
        assert midway(), "it never got half-way"
        output = _terminate(process, read_end)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
        os.close(read_end)
    return process.returncode, output.lstrip(b".").decode(errors="replace")


def _sleeps_writing(pid: int) -> bool:
    """Whether ``pid`` sleeps in a pipe's write. A SIGTERM sent a moment before that call (after
    Python's last look at its signals) would wait for the call to return, which it never does here;
    sent while it sleeps there, it interrupts it. Where the kernel hides wait channels ("0"), after
    a moment: `_terminate` repeats the signal if need be."""
    try:
        channel = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return True  # ended: the caller sees it
    if channel == "0":
        time.sleep(0.5)
        return True
    return "pipe_write" in channel


def _terminate(process: subprocess.Popen[bytes], read_end: int) -> bytes:
    """SIGTERM ``process`` and read its output to the end (bounded), the signal repeated while it
    still runs after 10 s (where the first could not be timed, see `_sleeps_writing`)."""
    output = b""
    process.send_signal(signal.SIGTERM)
    deadline, repeat = time.monotonic() + 60, time.monotonic() + 10
    while time.monotonic() < deadline:
        ready, _, _ = select.select([read_end], [], [], 0.5)
        if ready:
            chunk = os.read(read_end, 65536)
            if not chunk and process.poll() is not None:
                process.wait(timeout=30)
                return output
            output += chunk
        elif process.poll() is None and time.monotonic() > repeat:
            process.send_signal(signal.SIGTERM)
            repeat = time.monotonic() + 10
    raise AssertionError(f"it did not end within 60 s of SIGTERM: {output.lstrip(b'.')!r}")


def test_a_stopped_backup_leaves_nothing_beside_its_file(tmp_path: Path) -> None:
    env = _store_with_a_brain(tmp_path / "data")
    out = tmp_path / "backups"
    out.mkdir()

    def midway() -> bool:
        return (out / "nightly.bak.partial").exists() and any(out.glob(".brain-store-backup-*"))

    status, said = _stop_while_it_writes(env, midway, "backup", "--to", str(out / "nightly.bak"))
    assert status != 0 and "Traceback" not in said, said
    assert sorted(p.name for p in out.iterdir()) == [], "left: nightly.bak.partial and .brain-store-backup-*"


def test_a_stopped_migration_leaves_no_scratch_directory(tmp_path: Path) -> None:
    env = _store_with_a_brain(tmp_path / "data")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    status, said = _stop_while_it_writes({**env, "TMPDIR": str(scratch)}, lambda: any(scratch.iterdir()), "migrate",
                                         "--from", str(tmp_path / "data"), "--to", str(tmp_path / "moved"))
    assert status != 0 and "Traceback" not in said, said
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
