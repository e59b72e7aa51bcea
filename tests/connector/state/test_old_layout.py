"""A state directory written by the file classes of earlier versions keeps working.

``old_layout/`` was made by main at e768d78 (before the directory went through
``DirectoryStore``): ``OAuthState(dir, bytes(range(32)))``, one client registered through
``ClientRegistry``, a refresh family started through ``RefreshGrants`` (for ``static:old``),
``set_brain("static:old", "brain-old")`` and a web session through ``WebSessions(state=...)``;
the values it printed are below. Git keeps neither modes nor empty directories, so the test
copies it to a private directory first.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from connector.identity.base import Identity
from connector.oauth.clients import UNUSED_CLIENT_TTL_S, ClientRegistry
from connector.oauth.grants import RefreshGrants
from connector.oauth.state import OAuthState
from connector.state.files import StateError
from connector.webapp.sessions import WebSessions

# Dates inside: tests/test_clock_ahead.py runs this module again with the clock a year ahead.
pytestmark = pytest.mark.clock

OLD = Path(__file__).parent / "old_layout"
KEY = bytes(range(32))
CLIENT_ID = "bcc_UGNtqi0CEg37n02PVSkXsculTbsRGrtv"
FAMILY = "OGcnR_tlyErNOOpybgsG7D78"
REFRESH_TOKEN = "bcr1_O0a_OqeXnf240ISzqJtmpiuaoHFWVJSni7jHlAffdWg"
COOKIE = "MGzPdhqESip16LiUbEB23pE9xI7RZ4Xjx8-StOQ54Ig"
IDENTITY = Identity(subject="static:old", store_credential="cred-old", renewal_secret="renew-old",
                    credential_expires_at=None)
LONG = 100 * 365 * 86400.0


@pytest.fixture
def old_state(tmp_path: Path) -> Path:
    state_dir = tmp_path / "state"
    shutil.copytree(OLD, state_dir)
    for path in (state_dir, *state_dir.rglob("*")):
        path.chmod(0o700 if path.is_dir() else 0o600)
    return state_dir


def test_an_old_state_directory_keeps_its_clients_families_brains_and_sessions(old_state: Path) -> None:
    state = OAuthState(old_state, KEY)
    # The fixture's client was registered and never used, so the registry forgets it a day later:
    # read it on a clock pinned just after its registration, and show it expires on today's.
    registered_at = float(state.clients.get(CLIENT_ID)["issued_at"])
    client = ClientRegistry(state.clients, clock=lambda: registered_at + 60.0).get(CLIENT_ID)
    assert client is not None and client.client_name == "Old client"
    assert ClientRegistry(state.clients, clock=lambda: registered_at + UNUSED_CLIENT_TTL_S).get(CLIENT_ID) is None
    assert client.redirect_uris == ("https://old.example/cb",)
    assert state.get_brain("static:old") == "brain-old"
    grants = RefreshGrants(state, ttl_s=LONG, grace_s=60.0)
    assert grants.family_of(REFRESH_TOKEN) == FAMILY
    family, new_token = grants.rotate(REFRESH_TOKEN, IDENTITY)
    assert family.subject == "static:old" and grants.family_of(new_token) == FAMILY
    sessions = WebSessions(LONG, state=state)
    session = sessions.get(COOKIE)
    assert session is not None and session.subject == "static:old" and session.credential == "cred-old"
    assert state.damaged() == {}

    # What this version wrote is read by the next start, still under the same file names.
    again = OAuthState(old_state, KEY)
    assert RefreshGrants(again, ttl_s=LONG, grace_s=60.0).family_of(new_token) == FAMILY
    assert WebSessions(LONG, state=again).end(COOKIE) and WebSessions(LONG, state=again).get(COOKIE) is None
    assert sorted(path.name for path in old_state.glob("*.json")) == ["brains.json", "families.json", "refresh.json"]
    for path in old_state.rglob("*"):
        assert path.stat().st_mode & 0o777 == (0o700 if path.is_dir() else 0o600), path


def test_the_last_good_copy_of_an_old_version_is_used_when_its_file_is_damaged(old_state: Path) -> None:
    (old_state / "families.json").write_bytes(b"{trunc")
    state = OAuthState(old_state, KEY)
    assert "families.json" in state.damaged()
    assert RefreshGrants(state, ttl_s=LONG, grace_s=60.0).load_family(FAMILY) is not None
    os.remove(old_state / "families.json.last-good")
    with pytest.raises(StateError, match="families.json"):  # no good copy: start-up refuses rather than guess
        OAuthState(old_state, KEY)
