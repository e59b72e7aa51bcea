"""A brain whose metadata is damaged (bad JSON, wrong types, not a regular file, or naming another
brain) is accounted for by the commands over the whole store: `migrate`, `backup` and `rekey` do
everything else, then name it and exit with status 1. They used to leave it out with status 0
(`migrate`: without a word), so an operator who migrated and then deleted the source lost it. The
damaged brain is left exactly as it was; repaired, the next run takes it. Local disk and S3 alike."""

from __future__ import annotations

import json
from pathlib import Path

from tests.backup.support import KEY, OTHER_KEY, brains_with_archives, cli, client, fill, serve, tree
from tests.s3.cli import backend_for
from tests.s3.servers import S3Service


def _local_store(tmp_path: Path) -> tuple[dict[str, str], str, dict[str, str]]:
    """A store on disk: alice with brains fine, json, types, dir and copied (uploaded through a
    server) besides her first, empty one; returns its env, alice's token and brain ids by name."""
    data = tmp_path / "store"
    env = {"STORE_DATA_DIR": str(data), "HOME": str(tmp_path)}
    token = cli(env, "user", "add", "alice").stdout.splitlines()[-1]
    return env, token, brains_with_archives(env, tmp_path, token, ("fine", "json", "types", "dir", "copied"))


def _meta(data: Path, brain_id: str) -> Path:
    return next(data.glob(f"brains/*/{brain_id}/meta.json"))


def _damage(data: Path, brains: dict[str, str], names: tuple[str, ...]) -> dict[str, bytes]:
    """Damage the meta.json of each brain in ``names`` in the way its name says; returns every
    brain's intact bytes by name."""
    kept = {name: _meta(data, brain_id).read_bytes() for name, brain_id in brains.items()}
    for name in names:
        meta = _meta(data, brains[name])
        if name == "json":
            meta.write_bytes(kept[name][: len(kept[name]) // 2])  # cut short
        elif name == "types":
            wrong = json.loads(kept[name])
            wrong["generation"] = "many"
            meta.write_text(json.dumps(wrong))
        elif name == "dir":
            meta.unlink()
            meta.mkdir()  # not a regular file
        elif name == "copied":
            meta.write_bytes(kept["fine"])  # another brain's metadata in its place
    return kept


def _repair(data: Path, brain_id: str, intact: bytes) -> None:
    meta = _meta(data, brain_id)
    if meta.is_dir():
        meta.rmdir()
    meta.write_bytes(intact)


def test_migrate_and_backup_name_damaged_brains_and_fail_at_the_end(tmp_path: Path) -> None:
    env, token, brains = _local_store(tmp_path)
    data = Path(env["STORE_DATA_DIR"])
    damaged = ("json", "types", "dir", "copied")
    kept = _damage(data, brains, damaged)
    before = tree(data)
    home = {"HOME": str(tmp_path)}

    target = tmp_path / "target"
    done = cli(home, "migrate", "--from", str(data), "--to", str(target), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "Error: 4 brain(s) NOT migrated, their metadata is damaged: " in done.stderr, done.stderr
    assert "everything else was migrated; repair or restore them and migrate again" in done.stderr
    for name in damaged:
        assert f"/{brains[name]} (metadata {_meta(data, brains[name])}: " in done.stderr, done.stderr
        assert f"/{brains[name]} (metadata " in done.stdout, done.stdout  # its progress line, as it happened
    assert "a directory, not a regular file" in done.stderr and "Expected `int`, got `str`" in done.stderr
    alice_id = _meta(data, brains["fine"]).parent.parent.name
    assert f"/{brains['copied']} (metadata {_meta(data, brains['copied'])}: it names brain {alice_id}/" \
        f"{brains['fine']})" in done.stderr, done.stderr
    assert "migrated 1 user(s), 2 brain(s)" in done.stdout, done.stdout  # everything else was done (+ default)
    copied = {p.parent.name for p in target.glob("brains/*/*/meta.json")}
    assert brains["fine"] in copied and len(copied) == 2 and not copied & {brains[n] for n in damaged}
    assert tree(data) == before  # the source as it was, damage included

    backup = tmp_path / "store.backup"
    done = cli(env, "backup", "--to", str(backup), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"Error: {backup} was written without 4 brain(s) whose metadata is damaged: " in done.stderr, done.stderr
    for name in damaged:
        assert f"/{brains[name]} (metadata {_meta(data, brains[name])}: " in done.stderr, done.stderr
    assert done.stderr.count("NOT in the backup, its metadata is damaged") == 4, done.stderr
    assert "backup done: 1 user(s), 2 brain(s)" in done.stderr, done.stderr
    restored = tmp_path / "restored"
    cli({**home, "STORE_DATA_DIR": str(restored)}, "restore", "--from", str(backup))  # the rest: whole, usable
    assert {p.parent.name for p in restored.glob("brains/*/*/meta.json")} == copied
    assert tree(data) == before

    # repaired, the next pass brings it (the others stay reported until they are repaired too)
    _repair(data, brains["json"], kept["json"])
    done = cli(home, "migrate", "--from", str(data), "--to", str(target), check=False)
    assert done.returncode == 1 and "Error: 3 brain(s) NOT migrated" in done.stderr, done.stderr
    assert ", 1 brain(s), " in done.stdout and brains["json"] not in done.stderr
    for name in ("types", "dir", "copied"):
        _repair(data, brains[name], kept[name])
    done = cli(home, "migrate", "--from", str(data), "--to", str(target))
    assert ", 3 brain(s), " in done.stdout and "NOT" not in done.stdout + done.stderr
    done = cli(env, "backup", "--to", str(backup))
    assert "backup done: 1 user(s), 6 brain(s)" in done.stderr
    with serve({**env, "STORE_DATA_DIR": str(target)}, tmp_path) as server, client(server, token) as alice:
        assert sorted(b["name"] for b in alice.get("/api/brains").json()) == sorted([*brains, "default"])


def test_rekey_leaves_a_damaged_brain_as_it_is_and_says_so(tmp_path: Path) -> None:
    """Its archives keep the old key, so the old key must not be dropped on the strength of the run."""
    env, _, brains = _local_store(tmp_path)
    data = Path(env["STORE_DATA_DIR"])
    _damage(data, brains, ("json",))
    brain_dir = _meta(data, brains["json"]).parent
    untouched = tree(brain_dir)
    done = cli({**env, "NEW_ENCRYPTION_KEY": OTHER_KEY}, "rekey", check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "re-sealed 4 blob(s) in 5 brain(s)" in done.stdout, done.stdout
    assert "Error: 1 brain(s) NOT re-sealed, their metadata is damaged: " in done.stderr, done.stderr
    assert brains["json"] in done.stderr and "STORE_ENCRYPTION_PREVIOUS_KEYS" in done.stderr
    assert tree(brain_dir) == untouched


def _damage_record(moto: S3Service, env: dict[str, str], tmp: Path, user_id: str) -> tuple[str, str, bytes]:
    """Cut short the metadata object of ``user_id``'s first brain: (brain id, its key, intact bytes)."""
    backend = backend_for(moto, env, tmp / "inspect")
    brain_id = backend.list_brains(user_id)[0].id
    key = backend.meta_key(user_id, brain_id)
    s3 = moto.client()
    intact = s3.get_object(Bucket=env["STORE_S3_BUCKET"], Key=key)["Body"].read()
    s3.put_object(Bucket=env["STORE_S3_BUCKET"], Key=key, Body=intact[:40])
    return brain_id, key, intact


def test_on_s3_a_damaged_record_is_named_and_the_other_brains_go_on(tmp_path: Path, moto: S3Service) -> None:
    env = {**moto.store_env(moto.new_bucket()), "STORE_DATA_DIR": str(tmp_path / "spool"), "HOME": str(tmp_path),
           "STORE_ENCRYPTION_KEY": KEY}
    tokens, _ = fill(env, tmp_path, moto)
    alice = next(u for u in _users(moto, env) if u.name == "alice")
    brain_id, key, intact = _damage_record(moto, env, tmp_path, alice.id)
    where = f"s3://{env['STORE_S3_BUCKET']}/{key}"
    bucket = env["STORE_S3_BUCKET"]
    blobs = sorted(k for k in moto.keys(bucket, f"store/blobs/{alice.id}/{brain_id}/"))
    assert blobs

    # the server lists and serves alice's other brain (the listing was a 500 for all of them)
    with serve(env, tmp_path) as server, client(server, tokens["alice"]) as c:
        listed = c.get("/api/brains")
        assert listed.status_code == 200, listed.text
        assert [b["name"] for b in listed.json()] == ["work"]
        assert c.get(f"/api/brains/{brain_id}/sync").status_code == 500
        assert "Traceback" not in server.log()

    backup = tmp_path / "s3.backup"
    done = cli(env, "backup", "--to", str(backup), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"without 1 brain(s) whose metadata is damaged: {alice.id}/{brain_id} (metadata {where}: " \
        in done.stderr, done.stderr
    assert "backup done: 2 user(s), 2 brain(s)" in done.stderr, done.stderr

    target = tmp_path / "target"
    done = cli({**env, "STORE_BACKEND": "local"}, "migrate", "--from", f"s3://{bucket}/store", "--to", str(target),
               check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"1 brain(s) NOT migrated, their metadata is damaged: {alice.id}/{brain_id} (metadata {where}: " \
        in done.stderr, done.stderr
    assert "2 brain(s)" in done.stdout, done.stdout

    done = cli({**env, "NEW_ENCRYPTION_KEY": OTHER_KEY}, "rekey", check=False)
    assert done.returncode == 1 and "1 brain(s) NOT re-sealed" in done.stderr and where in done.stderr, done.stderr

    # the start-up sweep keeps its archives: which ones it names is unknown, none is an orphan
    backend_for(moto, env, tmp_path / "sweep").startup(orphan_age=0)
    assert sorted(moto.keys(bucket, f"store/blobs/{alice.id}/{brain_id}/")) == blobs
    assert moto.client().get_object(Bucket=bucket, Key=key)["Body"].read() == intact[:40]

    # repaired, the next pass brings it
    moto.client().put_object(Bucket=bucket, Key=key, Body=intact)
    done = cli({**env, "STORE_BACKEND": "local"}, "migrate", "--from", f"s3://{bucket}/store", "--to", str(target))
    assert "1 brain(s)" in done.stdout and "NOT" not in done.stdout + done.stderr


def _users(moto: S3Service, env: dict[str, str]) -> list:  # type: ignore[type-arg]
    from tests.backup.support import registry

    return registry(env, moto).users()
