"""The state key and the state directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from connector.oauth.state import OAuthState
from common.docstore import DirectoryStore
from connector.state.collection import DocCollection
from connector.state.files import StateError
from connector.state.sealing import KEY_FILE_NAME, SecretBox, load_state_key


def test_generated_key_file_is_private_and_reused(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    key, source = load_state_key(state_dir, None)
    assert source == "generated" and len(key) == 32
    assert (state_dir / KEY_FILE_NAME).stat().st_mode & 0o777 == 0o600
    assert state_dir.stat().st_mode & 0o777 == 0o700
    again, source = load_state_key(state_dir, None)
    assert again == key and source == "file"


def test_configured_key_wins_and_no_dir_means_ephemeral(tmp_path: Path) -> None:
    configured = bytes(range(32))
    assert load_state_key(tmp_path / "s", configured) == (configured, "configured")
    assert not (tmp_path / "s").exists()
    key, source = load_state_key(None, None)
    assert source == "ephemeral" and len(key) == 32


def test_readable_key_file_or_open_directory_refused(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    load_state_key(state_dir, None)
    os.chmod(state_dir / KEY_FILE_NAME, 0o644)
    with pytest.raises(StateError):
        load_state_key(state_dir, None)
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o777)
    os.chmod(open_dir, 0o777)
    with pytest.raises(StateError):
        load_state_key(open_dir, None)


def test_secret_box_binds_context_and_key() -> None:
    box = SecretBox(b"k" * 32)
    sealed = box.seal("bst_secret", "family:1")
    assert "bst_secret" not in sealed
    assert box.open(sealed, "family:1") == "bst_secret"
    assert box.open(sealed, "family:2") is None
    assert SecretBox(b"j" * 32).open(sealed, "family:1") is None
    assert box.open(sealed[:-4] + "AAAA", "family:1") is None


def test_brain_choice_persists(tmp_path: Path) -> None:
    state = OAuthState(tmp_path / "s", b"k" * 32)
    state.set_brain("static:u1", "brain-2")
    assert OAuthState(tmp_path / "s", b"k" * 32).get_brain("static:u1") == "brain-2"
    state.set_brain("static:u1", None)
    assert OAuthState(tmp_path / "s", b"k" * 32).get_brain("static:u1") is None


def test_failed_change_writes_nothing_and_corrupt_file_is_refused(tmp_path: Path) -> None:
    collection = DocCollection(DirectoryStore(tmp_path), "c.json", good_copy=True)
    collection.mutate(lambda records: records.__setitem__("a", 1))

    def broken(records: dict) -> None:
        records["b"] = 2
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        collection.mutate(broken)
    assert DocCollection(DirectoryStore(tmp_path), "c.json").records == {"a": 1}
    assert collection.records == {"a": 1}
    (tmp_path / "d.json").write_text("{not json")
    with pytest.raises(StateError):
        DocCollection(DirectoryStore(tmp_path), "d.json", good_copy=True)
