"""The Mental models page over HTTP against a real store: a model another device wrote into the brain is
listed and read; refusals (no model on the server, a read-only sign-in, no CSRF token, an unknown
model or action) change nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from connector.engine.format.brain import Brain
from connector.engine.tending.mental import MAX_NAME, MAX_QUESTION, MENTAL_FILE, CreateModel, SaveModel, new_model_id
from connector.engine.writes.ops import connector_memorize

from ..conftest import RunningStore, brains_of, device_write, download_brain
from .conftest import app_client, sign_in

pytestmark = pytest.mark.timeout(120)


def model_at_store(store: RunningStore, token: str, brain_id: str) -> tuple[str, str]:
    """Another device writes a memory and a mental model citing it; (model id, memory id)."""

    def write(brain: Brain) -> tuple[str, str]:
        now = datetime.now(UTC)
        memory = connector_memorize("Bob leads the <b>platform</b> team", agent="other device").apply(brain, now)
        memory_id = memory["stored"][0]["id"]
        model_id = new_model_id()
        CreateModel(model_id, "Team directory", "Who leads which team?").apply(brain, now)
        SaveModel(model_id, f"Bob leads **platform** [{memory_id}]. <script>alert(1)</script>", [], "operator",
                  "llama3.2").apply(brain, now)
        return model_id, memory_id

    return device_write(store.url, token, brain_id, write)


def test_the_page_reads_a_model_and_refusals_change_nothing(store: RunningStore) -> None:
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    model_id, memory_id = model_at_store(store, alice.token, brain_id)
    before = download_brain(store.url, alice.token, brain_id)[0].read(MENTAL_FILE)
    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token)
        listing = client.get("/app/mental")
        assert listing.status_code == 200
        assert f'/app/mental/{model_id}?brain={brain_id}"><bdi>Team directory</bdi></a>' in listing.text
        assert 'href="/app/mental">Mental models</a>' in listing.text  # the nav link
        # The form stops typing where the server would refuse (it allowed twice as much).
        assert f'id="mm-name" name="name" value="" maxlength="{MAX_NAME}"' in listing.text
        assert f'id="mm-question" name="question" value="" maxlength="{MAX_QUESTION}"' in listing.text
        page = client.get(f"/app/mental/{model_id}")
        assert page.status_code == 200 and "<strong>platform</strong>" in page.text
        assert "<script>" not in page.text and f'/app/memory/{memory_id}?brain={brain_id}"' in page.text
        assert client.get("/app/mental/mm_000000000000").status_code == 404
        # No model on this server: refresh says how to refresh from an assistant, and writes nothing.
        refused = client.post(f"/app/mental/{model_id}/refresh", data={"csrf": csrf})
        assert refused.status_code == 409 and "Ask your assistant to refresh it" in refused.text
        assert client.post(f"/app/mental/{model_id}/delete", data={}).status_code == 403  # no CSRF token
        assert client.post(f"/app/mental/{model_id}/explode", data={"csrf": csrf}).status_code == 404
        assert client.post("/app/mental/mm_000000000000/delete", data={"csrf": csrf}).status_code == 409
    assert download_brain(store.url, alice.token, brain_id)[0].read(MENTAL_FILE) == before

    with app_client(store.url) as client:
        csrf = sign_in(client, alice.token, access="read")
        page = client.get(f"/app/mental/{model_id}")
        assert page.status_code == 200 and ">Refresh<" not in page.text and ">Delete<" not in page.text
        refused = client.post(f"/app/mental/{model_id}/delete", data={"csrf": csrf})
        assert refused.status_code == 403 and "read-only" in refused.text
    assert download_brain(store.url, alice.token, brain_id)[0].read(MENTAL_FILE) == before
