"""The web app's edit and import show what the similar check found (as brain_memorize does)."""

from __future__ import annotations

import json
import re

import pytest

from connector.engine.format.archive import pack_archive
from tests.engine.similar_support import MEMORIES, governance_brain

from ..conftest import RunningStore, brains_of, download_brain, upload_raw
from .conftest import app_client, sign_in

pytestmark = pytest.mark.timeout(300)

MOVED = "The dentist appointment is on 21 May at 3 pm at the clinic near Ikebukuro station."


def test_edit_and_import_name_the_memories_they_repeat_or_update(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    brain, ids = governance_brain()
    assert upload_raw(store.url, alice.token, brain_id, pack_archive(brain)).status_code == 200
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        # Edit the train pass memory into the bread memory's exact text: saved, and the page says so.
        edited = client.post(f"/app/memory/{ids['Train pass']}/edit", data={
            "csrf": csrf, "title": "Sourdough", "content": MEMORIES[6]["content"], "type": "learning", "tags": "",
        })
        assert edited.status_code == 303
        page = client.get(edited.headers["location"])
        assert page.status_code == 200
        assert "Similar memories already in the brain" in page.text
        assert re.search(rf'exactly the content of <a href="/app/memory/{ids["Bread baking"]}\?brain={brain_id}"><bdi>Bread baking</bdi></a>',
                         page.text), page.text
        # The memory the edit replaced is not listed; nothing else was changed.
        assert ids["Train pass"] not in page.text.split("Similar memories already in the brain")[1].split("</section>")[0]
        entries = download_brain(store.url, alice.token, brain_id)[0].read_json("index.json")["memories"]
        assert "superseded_by" not in entries[ids["Bread baking"]]
        # A plain visit of the page runs no check.
        assert "Similar memories" not in client.get(f"/app/memory/{ids['Bread baking']}").text

        # An import whose memory updates one already here: the dry run names it.
        document = {"format": "brain-store/memories", "version": 1, "memories": [
            {"title": "Dentist moved", "type": "learning", "path": "notes/", "content": MOVED},
        ]}
        preview = client.post("/app/import", data={"csrf": csrf},
                              files={"file": ("brain.json", json.dumps(document).encode(), "application/json")})
        assert preview.status_code == 200, preview.text
        assert "Already in this brain, in other words" in preview.text
        assert re.search(rf'&ldquo;<bdi>Dentist moved</bdi>&rdquo;: updates <a href="/app/memory/{ids["Dentist appointment"]}\?brain={brain_id}">'
                         r"<bdi>Dentist appointment</bdi></a> \(\d+% sure\)", preview.text), preview.text
