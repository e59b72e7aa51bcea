"""A backup or migration stopped by SIGTERM (`timeout`, `systemctl stop`, `docker stop`) leaves no
partial file or scratch directory behind, as Ctrl-C already did not."""

from __future__ import annotations

import os
import select
import signal
import subprocess
from pathlib import Path

from tests.backup.support import archive, registry, sealed_brain
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
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    return subprocess.CompletedProcess(args, process.returncode, (output + rest).decode())


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
