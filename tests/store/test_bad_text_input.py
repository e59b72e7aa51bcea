"""Hostile text and JSON bodies against a real store (issue 24, items 10 and 11): deeply nested
JSON is a 400, not a 500; key labels and brain names refuse controls, line separators and
bidirectional characters, as every other one-line field does."""

from __future__ import annotations

import httpx
import pytest

DEEP = b"[" * 30_000 + b"]" * 30_000  # under the 64 KiB body limit, far deeper than any request


@pytest.mark.parametrize("path", ["/api/brains", "/api/keys", "/api/brains/{brain}/members"])
def test_deeply_nested_json_is_a_400(alice: tuple[httpx.Client, str], path: str) -> None:
    client, brain = alice
    method = client.put if path.endswith("members") else client.post
    r = method(path.format(brain=brain), content=DEEP, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "request body is not valid JSON"
    r = method(path.format(brain=brain), content=b'{"name": ' + DEEP + b"}")
    assert r.status_code == 400


@pytest.mark.parametrize("text", ["ci\u202egnp.exe", "ci\u2028fake line", "ci\u2029", "ci\x85", "ci\u200f", "ci\nx"])
def test_key_labels_and_brain_names_refuse_unsafe_characters(alice: tuple[httpx.Client, str], text: str) -> None:
    client, brain = alice
    r = client.post("/api/keys", json={"brains": [brain], "scope": "read", "label": text})
    assert r.status_code == 400 and "label" in r.json()["error"]
    assert client.get("/api/keys").json()["keys"] == []
    r = client.post("/api/brains", json={"name": text})
    assert r.status_code == 400
    assert [b["id"] for b in client.get("/api/brains").json()] == [brain]
