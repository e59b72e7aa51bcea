"""A stored archive that is not a regular file (a named pipe or device left in a brain's blobs/
by damage, or by someone with write access to the data directory) is refused at once: `backup`,
`migrate`, `rekey` and `restore` fail with a clear message and a download answers an error. Opening a
named pipe without a writer waited forever: the command hung, and a server on local disk, which
opens downloads on its event loop, stopped answering anyone."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx

from tests.backup.support import KEY, OTHER_KEY, archive, brains_with_archives, cli, client, registry, sealed_brain, serve


def _pipe_in_place_of(blob: Path) -> None:
    blob.unlink()
    os.mkfifo(blob)


def test_backup_and_migrate_refuse_a_named_pipe_for_an_archive_at_once(tmp_path: Path) -> None:
    data = tmp_path / "store"
    env = {"STORE_DATA_DIR": str(data), "STORE_ENCRYPTION_KEY": KEY}
    user, _ = registry(env).add("alice")
    sealed_brain(data, KEY, user.id, archive({"a.md": b"held"}))
    [blob] = data.glob("brains/*/*/blobs/*")
    _pipe_in_place_of(blob)
    out = tmp_path / "out"
    out.mkdir()

    started = time.monotonic()
    done = cli(env, "backup", "--to", str(out / "store.backup"), check=False)  # the helper's timeout: 120 s
    assert time.monotonic() - started < 30
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"Error: backup failed: {blob}: a named pipe, not a regular file" in done.stderr, done.stderr
    assert list(out.iterdir()) == []  # no partial backup

    done = cli(env, "migrate", "--from", str(data), "--to", str(tmp_path / "target"), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"archive {blob.name}: {blob}: a named pipe, not a regular file (damaged at the source)" in done.stderr, \
        done.stderr

    done = cli(env, "rekey", "--new-key", OTHER_KEY, check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"rekey stopped: {blob}: a named pipe, not a regular file" in done.stderr, done.stderr

    pipe = tmp_path / "backup-pipe"
    os.mkfifo(pipe)
    done = cli({"STORE_DATA_DIR": str(tmp_path / "restored")}, "restore", "--from", str(pipe), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{pipe}: a named pipe, not a regular file; give the backup file itself" in done.stderr, done.stderr


def test_a_download_of_a_named_pipe_answers_an_error_and_the_server_goes_on(tmp_path: Path) -> None:
    """Plain (read whole or mapped) and sealed (streamed through the key) downloads alike."""
    for env in ({"STORE_DATA_DIR": str(tmp_path / "plain")},
                {"STORE_DATA_DIR": str(tmp_path / "sealed"), "STORE_ENCRYPTION_KEY": KEY}):
        token = cli(env, "user", "add", "alice").stdout.splitlines()[-1]
        brains = brains_with_archives(env, tmp_path, token, ("damaged", "fine"))
        [blob] = Path(env["STORE_DATA_DIR"]).glob(f"brains/*/{brains['damaged']}/blobs/*")
        _pipe_in_place_of(blob)
        with serve(env, tmp_path) as server, client(server, token) as alice:
            answer = alice.get(f"/api/brains/{brains['damaged']}/sync", timeout=10)
            assert answer.status_code == 500, answer.text
            assert "stored archive is damaged; the operator has been told" in answer.text, answer.text
            assert alice.get(f"/api/brains/{brains['fine']}/sync", timeout=10).status_code == 200
            assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200
            log = server.log()
        assert f"refusing to serve brain {brains['damaged']} archive {blob.name}: {blob}: a named pipe, not a " \
            "regular file" in log, log
        assert "Traceback" not in log, log


def test_a_named_pipe_for_a_record_stops_nothing(tmp_path: Path) -> None:
    """Records were opened with a plain open(): a named pipe put in place of a brain's meta.json hung
    `backup`, `migrate` and the server's requests for that user; one in place of users.json hung every
    command; one left in tmp/ hung the server's start (its clean-up opened it). Now a pipe for meta.json
    is a damaged brain (the others go on), one for users.json an error naming it, and one in tmp/ is
    removed at start."""
    data = tmp_path / "store"
    env = {"STORE_DATA_DIR": str(data)}
    token = cli(env, "user", "add", "alice").stdout.splitlines()[-1]
    brains = brains_with_archives(env, tmp_path, token, ("damaged", "fine"))
    [meta] = data.glob(f"brains/*/{brains['damaged']}/meta.json")
    _pipe_in_place_of(meta)
    os.mkfifo(data / "tmp" / "left-over")

    started = time.monotonic()
    done = cli(env, "backup", "--to", str(tmp_path / "store.backup"), check=False)  # the helper's timeout: 120 s
    # the rest is backed up; the damaged brain is named and the status says the backup is not whole
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"brain metadata {meta} is damaged (a named pipe, not a regular file)" in done.stderr, done.stderr
    assert f"{brains['damaged']} (metadata {meta}: a named pipe, not a regular file)" in done.stderr, done.stderr
    assert f"{brains['fine']} (fine) 1 archive(s)" in done.stderr, done.stderr
    assert (tmp_path / "store.backup").is_file()
    with serve(env, tmp_path) as server, client(server, token) as alice:
        assert alice.get(f"/api/brains/{brains['fine']}/sync", timeout=10).status_code == 200
        assert alice.get(f"/api/brains/{brains['damaged']}/sync", timeout=10).status_code >= 500
        assert "Traceback" not in server.log()
    assert not (data / "tmp" / "left-over").exists()
    assert time.monotonic() - started < 60

    users = data / "users.json"
    kept = users.read_bytes()
    _pipe_in_place_of(users)
    for args in (("backup", "--to", str(tmp_path / "second.backup")),
                 ("migrate", "--from", str(data), "--to", str(tmp_path / "target")), ("user", "list")):
        started = time.monotonic()
        done = cli(env if args[0] != "migrate" else {}, *args, check=False)
        assert time.monotonic() - started < 30
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"cannot read users.json in the directory {data}: a named pipe, not a regular file" in done.stderr, \
            done.stderr
    users.unlink()
    users.write_bytes(kept)
