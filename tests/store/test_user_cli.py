"""`brain-store user ...` as an operator meets it: which store it acts on, a missing data
directory, brains of removed users (list, purge, adopt), and one meaning of "stored bytes"."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import click
import pytest

from tests.store.conftest import add_user, brain_files, cli, make_archive, start_store, upload
from tests.support.cli_tree import every_command
from tests.support.processes import console_script

KEY = "33" * 32


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([console_script("brain-store"), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args", [("user", "list"), ("user", "rotate", "alice"), ("user", "remove", "alice"),
                                  ("user", "allow", "alice"), ("user", "orphans"), ("user", "purge", "usr_12345678"),
                                  ("user", "adopt", "usr_12345678", "bob"),
                                  ("share", "default", "--with", "alice", "--role", "viewer"),
                                  ("unshare", "default", "--with", "alice"), ("audit", "default"), ("key", "list"),
                                  ("key", "create", "--user", "alice", "--brain", "default", "--scope", "read"),
                                  ("key", "revoke", "bak_1234")])
def test_commands_on_a_missing_data_directory_say_so_and_create_nothing(args: tuple[str, ...], tmp_path: Path) -> None:
    missing = tmp_path / "no-such-store"
    done = _run(*args, "--data", str(missing))
    assert done.returncode == 1
    assert done.stderr.strip() == (f"Error: {missing}: no such data directory (give the store's --data or "
                                   "STORE_DATA_DIR; `brain-store user add` creates a new one)")
    assert not missing.exists()


def test_each_user_command_names_the_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    added = cli("user", "add", "alice", data=data)
    assert added.stdout.startswith("created user alice (") and f") in {data}\n" in added.stdout
    assert cli("user", "list", data=data).stdout.startswith(f"users of {data}:\n")
    assert f"in {data};" in cli("user", "rotate", "alice", data=data).stdout
    assert f"from {data};" in cli("user", "remove", "alice", data=data).stdout


def test_brains_of_removed_users_are_listed_purged_or_adopted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "STORE_ENCRYPTION_KEY": KEY}  # adopted brains stay readable: same id, same key
    tokens = {name: add_user(data, name) for name in ("alice", "bob", "carol")}
    archive = make_archive(brain_files(3, "bob"))
    with start_store(tmp_path, data=data, env={"STORE_ENCRYPTION_KEY": KEY}) as store:
        ids = {}
        for name in ("bob", "carol"):
            client = store.client(tokens[name])
            ids[name] = client.get("/auth/me").json()["user"]["id"]
            brain = client.get("/api/brains").json()[0]["id"]
            assert upload(client, brain, archive).status_code == 200
        assert "no brains" not in cli("user", "orphans", data=data, env=env).stdout
        for name in ("bob", "carol"):
            removed = cli("user", "remove", name, data=data, env=env).stdout
            assert f"`brain-store user purge {ids[name]}`" in removed and f"user adopt {ids[name]} NAME" in removed
            assert store.client(tokens[name]).get("/auth/me").status_code == 401

        listing = cli("user", "list", data=data, env=env).stdout
        assert "2 brain(s) of 2 removed user(s) are still kept: `brain-store user orphans`" in listing
        orphans = cli("user", "orphans", data=data, env=env).stdout
        assert ids["bob"] in orphans and ids["carol"] in orphans and ids["bob"] not in listing

        # a current user is neither purged nor adopted through these commands
        alice_id = store.client(tokens["alice"]).get("/auth/me").json()["user"]["id"]
        refused = _run("user", "purge", alice_id, "--data", str(data), env={"STORE_ENCRYPTION_KEY": KEY})
        assert refused.returncode == 1 and "is a current user" in refused.stderr

        adopted = cli("user", "adopt", ids["bob"], "robert", data=data, env=env).stdout
        assert "with the 1 brain(s) of the removed user" in adopted
        robert = store.client(adopted.strip().splitlines()[-1])
        assert robert.get("/auth/me").json()["user"] == {**robert.get("/auth/me").json()["user"], "name": "robert"}
        brain = robert.get("/api/brains").json()[0]
        got = robert.get(f"/api/brains/{brain['id']}/sync")
        assert got.status_code == 200 and hashlib.sha256(got.content).hexdigest() == hashlib.sha256(archive).hexdigest()
        assert store.client(tokens["bob"]).get("/auth/me").status_code == 401  # the old token stays dead

        purged = cli("user", "purge", ids["carol"], data=data, env=env).stdout
        assert purged.startswith(f"deleted 1 brain(s) of removed user {ids['carol']} from {data}")
        assert not (data / "brains" / ids["carol"]).exists()
        assert cli("user", "orphans", data=data, env=env).stdout.endswith("none\n")
        gone = _run("user", "adopt", ids["carol"], "x", "--data", str(data), env={"STORE_ENCRYPTION_KEY": KEY})
        assert gone.returncode == 1 and "no brains of a removed user" in gone.stderr


def test_stored_bytes_mean_the_same_everywhere(tmp_path: Path) -> None:
    """user list, the API's stored_bytes, backup, restore and migrate print one number for one store."""
    data = tmp_path / "data"
    env = {**os.environ, "STORE_ENCRYPTION_KEY": KEY, "STORE_FSYNC": "0"}  # sealed blobs are larger on disk
    token = add_user(data, "alice")
    with start_store(tmp_path, data=data, env={"STORE_ENCRYPTION_KEY": KEY}) as store:
        client = store.client(token)
        brain = client.get("/api/brains").json()[0]["id"]
        for i in range(3):
            assert upload(client, brain, make_archive(brain_files(4, f"v{i}"))).status_code == 200
        api = sum(b["stored_bytes"] for b in client.get("/api/brains").json())
    row = next(line for line in cli("user", "list", data=data, env=env).stdout.splitlines() if " alice " in line)
    assert int(row.split()[-2]) == api
    on_disk = sum(p.stat().st_size for p in data.rglob("blobs/*"))
    assert on_disk > api  # what the number is not: the sealed files' size

    backup = tmp_path / "b.bak"
    made = cli("backup", "--to", str(backup), data=data, env=env).stderr
    assert re.search(rf"backup done: .* {api} stored bytes; backup file \d+ bytes", made), made
    restored = cli("restore", "--from", str(backup), data=tmp_path / "copy", env=env).stderr
    assert f"verified: 1 user(s), 1 brain(s), 3 archive(s), {api} stored bytes" in restored
    assert re.search(rf"restore done: .* {api} stored bytes", restored), restored
    moved = subprocess.run([console_script("brain-store"), "migrate", "--from", str(data), "--to",
                            str(tmp_path / "moved")], capture_output=True, text=True, timeout=60, env=env)
    assert f"{api} stored bytes" in moved.stdout, moved.stdout + moved.stderr


def test_user_list_and_brain_list_say_which_bytes_they_count(tmp_path: Path) -> None:
    """Issue 36 item 9e: `user list` and `brain list` name their byte columns (one brain's current
    archive vs everything kept with its snapshots), agree with the API, and the help says so."""
    data = tmp_path / "data"
    token = add_user(data, "alice")
    with start_store(tmp_path, data=data) as store:
        client = store.client(token)
        brain = client.get("/api/brains").json()[0]["id"]
        for i in range(3):
            assert upload(client, brain, make_archive(brain_files(4, f"v{i}"))).status_code == 200
        record = client.get("/api/brains").json()[0]
    assert record["stored_bytes"] > record["size_bytes"] > 0  # two snapshots are kept besides
    users = cli("user", "list", data=data).stdout.splitlines()
    assert "WITH SNAPSHOTS" in users[1] and "STORED BYTES" not in users[1]
    assert int(next(line for line in users if " alice " in line).split()[-2]) == record["stored_bytes"]
    brains = cli("brain", "list", data=data).stdout.splitlines()
    assert brains[1].split()[4:8] == ["ARCHIVE", "WITH", "SNAPSHOTS", "LAST"]
    row = next(line for line in brains if line.startswith(brain)).split()
    assert (int(row[4]), int(row[5])) == (record["size_bytes"], record["stored_bytes"])
    listed = json.loads(cli("brain", "list", "--json", data=data).stdout)[0]
    assert (listed["size_bytes"], listed["stored_bytes"]) == (record["size_bytes"], record["stored_bytes"])
    brain_help = " ".join(_run("brain", "list", "--help").stdout.split())
    assert "ARCHIVE is the size of the brain's current archive" in brain_help
    assert "WITH SNAPSHOTS adds the earlier versions the store keeps" in brain_help
    user_help = " ".join(_run("user", "list", "--help").stdout.split())
    assert "WITH SNAPSHOTS is the user's stored bytes" in user_help


def test_a_name_never_passes_for_another_users_e_mail(tmp_path: Path) -> None:
    """Issue 24 item 8: `user add` refuses another user's e-mail as a name (and control characters);
    `share --with ADDRESS` means the user whose e-mail it is, even if an older user is named so."""
    data = tmp_path / "data"
    cli("user", "add", "alice", "--email", "alice@example.org", data=data)
    for bad, why in (("alice@example.org", "is the e-mail address of another user"),
                     ("ALICE@example.org", "is the e-mail address of another user"),
                     ("mallory\nalice", "a user name is 1-128"), ("mallory\u2028x", "a user name is 1-128"),
                     ("王小明", "a user name is 1-128 ASCII letters (a-z, A-Z), digits")):
        done = _run("user", "add", bad, "--data", str(data))
        assert done.returncode == 1 and why in done.stderr and "Traceback" not in done.stderr
    # a user named like an address added before the owner of that address had an account
    from store.auth.users import UserRegistry

    registry = UserRegistry(data)
    registry.add("bob@example.org")
    cli("user", "add", "bob", "--email", "bob@example.org", data=data)
    alice_brain = next((data / "brains" / registry.find("alice").id).iterdir()).name  # type: ignore[union-attr]
    out = cli("share", alice_brain, "--with", "bob@example.org", "--role", "viewer", data=data).stdout
    assert out.startswith("bob is now viewer")
    from store.sharing.registry import SharingRegistry

    share = SharingRegistry(data).share(alice_brain)
    assert share is not None and list(share.members) == [registry.find("bob").id]  # type: ignore[union-attr]


def test_adopt_drops_keys_and_memberships_left_by_an_older_remove(tmp_path: Path) -> None:
    """A user removed before `user remove` cleaned up (only users.json changed): `adopt` still hands
    over their own brains only."""
    from store.auth.users import UserRegistry
    from store.sharing.registry import SharingRegistry

    data = tmp_path / "data"
    cli("user", "add", "alice", data=data)
    cli("user", "add", "frank", data=data)
    registry = UserRegistry(data)
    alice, frank = registry.find("alice"), registry.find("frank")
    assert alice is not None and frank is not None
    alice_brain = next((data / "brains" / alice.id).iterdir()).name
    frank_brain = next((data / "brains" / frank.id).iterdir()).name
    cli("share", alice_brain, "--with", "frank", "--role", "editor", data=data)
    cli("share", frank_brain, "--with", "alice", "--role", "viewer", data=data)
    cli("key", "create", "--user", "frank", "--brain", frank_brain, "--scope", "write", data=data)
    registry.remove("frank")  # what an older `user remove` did
    cli("user", "adopt", frank.id, "grace", data=data)
    sharing = SharingRegistry(data)
    assert sharing.keys(frank.id) == [] and sharing.share(alice_brain) is None
    share = sharing.share(frank_brain)
    assert share is not None and share.members == {alice.id: "viewer"}


@pytest.mark.parametrize("args", [("serve", "--port", "0"), ("restore", "--from", "BACKUP")])
def test_a_data_directory_that_cannot_be_made_is_one_line(args: tuple[str, ...], tmp_path: Path) -> None:
    add_user(tmp_path / "source", "alice")
    cli("backup", "--to", str(tmp_path / "store.bak"), data=tmp_path / "source")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    args = tuple(str(tmp_path / "store.bak") if a == "BACKUP" else a for a in args)
    done = _run(*args, "--data", str(blocker / "data"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and str(blocker) in done.stderr, done.stderr


def test_an_audit_directory_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    done = _run("serve", "--port", "0", "--data", str(tmp_path / "data"),
                env={"STORE_AUDIT_LOG": str(blocker / "audit")})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and str(blocker / "audit") in done.stderr, done.stderr


@pytest.mark.parametrize("email", ["a\nb  x  static", "a\u2028b@example.org", "a\u202eb@example.org",
                                   "a b@example.org"])
def test_an_e_mail_that_would_break_its_line_is_refused(email: str, tmp_path: Path) -> None:
    """The e-mail is printed on the user's line in `user list`, beside the name that already
    may not hold such characters: a newline in it forged a line there."""
    data = tmp_path / "data"
    cli("user", "add", "alice", data=data)
    done = _run("user", "add", "mallory", "--email", email, "--data", str(data))
    assert done.returncode == 1 and "an e-mail address is" in done.stderr, done.stdout + done.stderr
    assert [u["name"] for u in json.loads(cli("user", "list", "--json", data=data).stdout)] == ["alice"]


@pytest.mark.parametrize("port", ["-1", "70000"])
def test_serve_refuses_a_port_out_of_range(port: str, tmp_path: Path) -> None:
    """As STORE_PORT is: the flag went to bind() unchecked (OverflowError traceback)."""
    done = _run("serve", "--port", port, "--data", str(tmp_path / "data"))
    assert done.returncode == 2 and "Invalid value for '--port'" in done.stderr, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_serve_prints_a_usable_url_for_an_ipv6_address(tmp_path: Path) -> None:
    """`http://::1:8787` is no URL: an IPv6 literal goes in brackets."""
    process = subprocess.Popen([console_script("brain-store"), "serve", "--host", "::1", "--port", "0",
                                "--data", str(tmp_path / "data")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, env={**os.environ, "STORE_QUIET": "1"})
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert re.fullmatch(r"listening on http://\[::1\]:\d+\n", line), line


def test_serve_refuses_a_data_directory_others_can_write(tmp_path: Path) -> None:
    """Others could put their own users.json there: a token of theirs for every brain."""
    data = tmp_path / "data"
    cli("user", "add", "alice", data=data)
    data.chmod(0o777)
    done = _run("serve", "--port", "0", "--data", str(data))
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip() == (f"Error: data directory {data} is writable by others (mode 777); "
                                   f"make it private: chmod 700 {data}")


def test_a_users_file_read_as_nothing_makes_no_user_an_orphan(tmp_path: Path) -> None:
    """users.json damaged with no last good copy: every user passed for a removed one, and
    `user purge ID` deleted a current user's brains (`adopt` dropped their agent keys)."""
    data = tmp_path / "data"
    cli("user", "add", "alice", data=data)
    alice = json.loads(cli("user", "list", "--json", data=data).stdout)[0]["id"]
    (data / "users.json").write_text("{broken")
    (data / "users.json.last-good").unlink()
    for args in (("user", "orphans"), ("user", "purge", alice), ("user", "adopt", alice, "mallory")):
        done = _run(*args, "--data", str(data))
        assert done.returncode == 1 and "no readable last good copy" in done.stderr, done.stdout + done.stderr
    assert (data / "brains" / alice).is_dir() and any((data / "brains" / alice).iterdir())
    # nor does a listing pass it off as an empty store ("no users" and "no brains", status 0)
    for args in (("user", "list"), ("user", "list", "--json"), ("brain", "list"), ("key", "list"),
                 ("brain", "create", "work", "--user", "alice")):
        done = _run(*args, "--data", str(data))
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
        assert "users.json is unreadable or corrupt" in done.stderr and "restore it" in done.stderr, done.stderr
        assert "no users" not in done.stdout and "no brains" not in done.stdout and "[]" not in done.stdout


def test_output_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    """click ends a command whose reader went away without a word; the one-line OSError
    message must not turn that into `Error: [Errno 32] Broken pipe`."""
    data = tmp_path / "data"
    for name in ("alice", "bob", "carol"):
        cli("user", "add", name, data=data)
    process = subprocess.Popen([console_script("brain-store"), "user", "list", "--data", str(data)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before the first line is written
    stderr = process.stderr.read()
    process.wait(timeout=60)
    assert stderr == "", stderr


def test_an_e_mail_address_is_one_account_and_old_duplicates_are_refused_by_address(tmp_path: Path) -> None:
    """`user add` refuses an address another user has (ignoring case and surrounding spaces); a store
    that already holds two users with one address keeps working, but `share --with ADDRESS` (CLI and
    HTTP) is refused as ambiguous, naming the users for the operator, instead of picking the oldest."""
    import msgspec

    from store.auth.users import User, UserRegistry

    data = tmp_path / "data"
    alice_token = add_user(data, "alice", "alice@example.org")
    for taken in ("alice@example.org", "ALICE@Example.ORG"):
        done = _run("user", "add", "mallory", "--email", taken, "--data", str(data))
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert "the e-mail address" in done.stderr and "is already used by the user 'alice'" in done.stderr
    registry = UserRegistry(data)
    assert registry.find("mallory") is None
    # A users file from before the rule: two accounts share an address (one written with spaces, upper case).
    add_user(data, "bob", "bob@example.org")
    add_user(data, "robert")

    def duplicate(doc: object) -> None:
        users = doc.users  # type: ignore[attr-defined]
        users[:] = [msgspec.structs.replace(u, email=" Bob@Example.org ") if u.name == "robert" else u for u in users]

    registry.edit(duplicate)
    robert = registry.find("robert")
    bob = registry.find("bob")
    assert isinstance(robert, User) and isinstance(bob, User)
    alice_brain = next((data / "brains" / registry.find("alice").id).iterdir()).name  # type: ignore[union-attr]
    done = _run("share", alice_brain, "--with", "bob@example.org", "--role", "viewer", "--data", str(data))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())
    assert "several users have the e-mail address 'bob@example.org'" in message
    assert f"bob ({bob.id})" in message and f"robert ({robert.id})" in message
    assert "Name the user by their name or id instead" in message
    from store.sharing.registry import SharingRegistry

    assert SharingRegistry(data).share(alice_brain) is None  # nothing shared
    assert cli("share", alice_brain, "--with", "robert", "--role", "viewer", data=data).stdout.startswith("robert is now viewer")

    with start_store(tmp_path, data=data) as store, store.client(alice_token) as alice:
        refused = alice.put(f"/api/brains/{alice_brain}/members", json={"user": "BOB@example.org", "role": "viewer"})
        assert refused.status_code == 409
        assert "several users have the e-mail address" in refused.json()["error"]
        assert robert.id not in refused.text  # the accounts are named to the operator only
        assert alice.delete(f"/api/brains/{alice_brain}/members/bob@example.org").status_code == 409
        members = alice.get(f"/api/brains/{alice_brain}/members").json()["members"]
        assert [m["name"] for m in members] == ["alice", "robert"]  # unchanged
        assert alice.put(f"/api/brains/{alice_brain}/members", json={"user": "bob", "role": "viewer"}).status_code == 200


def test_every_data_option_names_the_default_data_directory() -> None:
    """Every store command taking ``--data`` (but ``dev``, which has its own) says in its help which
    directory it acts on without one: the default the settings use. backup, restore, rekey and
    import-reference named only STORE_DATA_DIR."""
    from store.settings import StoreSettings

    default = str(StoreSettings.from_env({}).data_dir).replace(str(Path.home()), "~")
    assert default == "~/.brain-store"
    silent = []
    for name, command in every_command().items():
        data = [option for option in command.params if option.name == "data"]
        if name.startswith("brain-store ") and name != "brain-store dev" and data:
            if f"default {default}" not in (data[0].help or ""):
                silent.append(name)
    assert not silent, f"--data help without the default: {silent}"


def test_every_data_option_says_what_it_is_with_a_bucket() -> None:
    """With STORE_BACKEND=s3 every store command acts on the bucket (serve keeps only scratch files
    in the data directory), and its ``--data`` help says so: the user, brain, share, key, audit,
    rekey and serve ones read as if the data directory were the store there too."""
    unsaid = [name for name, command in every_command().items() if name.startswith("brain-store ")
              and name != "brain-store dev"  # always a local store of its own
              for option in command.params if option.name == "data" and "STORE_BACKEND=s3" not in (option.help or "")]
    assert not unsaid, f"--data help silent about STORE_BACKEND=s3: {unsaid}"


def test_every_option_read_from_the_environment_names_its_variable() -> None:
    """An option click also takes from an environment variable says which one in its help, so a
    secret can stay off the command line (`check --token` took BRAIN_STORE_CHECK_TOKEN unsaid)."""
    unsaid = [f"{name} --{option.name}: {option.envvar}" for name, command in every_command().items()
              for option in command.params
              if isinstance(option, click.Option) and option.envvar and f"env {option.envvar}" not in (option.help or "")]
    assert not unsaid, unsaid


def test_rotate_and_remove_of_no_such_user_say_where_the_users_are(tmp_path: Path) -> None:
    """They said only `no user 'nosuch'`, where every other command naming a user adds the hint."""
    data = tmp_path / "data"
    add_user(data, "alice")
    users_file = (data / "users.json").read_bytes()
    for args in (("rotate", "nosuch"), ("remove", "nosuch"), ("remove", "nosuch", "--purge")):
        done = _run("user", *args, "--data", str(data))
        assert done.returncode == 1 and done.stdout == "", (args, done.stdout)
        assert done.stderr == "Error: no user 'nosuch' (`brain-store user list` shows them)\n", (args, done.stderr)
    assert (data / "users.json").read_bytes() == users_file


def test_audit_of_a_brain_without_events_says_so(tmp_path: Path) -> None:
    """It printed nothing with status 0; now one line says the log is empty (on stderr: stdout stays
    JSON lines), and a brain with events prints them as before."""
    data = tmp_path / "data"
    add_user(data, "alice")
    add_user(data, "bob")
    brain = json.loads(cli("brain", "list", "--user", "alice", "--json", data=data).stdout)[0]["id"]
    empty = _run("audit", "default", "--user", "alice", "--data", str(data))
    assert empty.returncode == 0 and empty.stdout == "", empty.stdout
    assert empty.stderr == (f"no events in the audit log of brain {brain} (it records member and key changes, and "
                            "uploads and restores of shared brains)\n"), empty.stderr
    cli("share", brain, "--with", "bob", "--role", "viewer", data=data)
    logged = _run("audit", "default", "--user", "alice", "--data", str(data))
    assert logged.returncode == 0 and logged.stderr == "", logged.stderr
    assert [json.loads(line)["action"] for line in logged.stdout.splitlines()] == ["member_set"]
