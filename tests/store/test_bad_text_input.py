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


def test_a_multipart_header_that_is_not_utf8_is_refused_in_plain_words(alice: tuple[httpx.Client, str]) -> None:
    # The answer showed Python's repr of a tuple holding the UnicodeDecodeError.
    client, brain = alice
    body = (b'--XyZ\r\nContent-Disposition: form-data; name="\xff\xfe"\r\n\r\nabc\r\n'
            b'--XyZ\r\nContent-Disposition: form-data; name="brain"\r\n\r\nx\r\n--XyZ--\r\n')
    r = client.put(f"/api/brains/{brain}/sync", content=body,
                   headers={"content-type": "multipart/form-data; boundary=XyZ"})
    assert r.status_code == 400
    assert r.json()["error"] == "malformed multipart body: Segment header failed to decode"
