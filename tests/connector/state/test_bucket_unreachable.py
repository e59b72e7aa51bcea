"""The state in a bucket that stops answering: a clear 503, nothing half-written, and back when it returns."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest
from litestar.testing import TestClient

from connector.app import create_app
from connector.settings import ConnectorSettings
from tests.s3.servers import CREDENTIALS, moto_server

pytestmark = [pytest.mark.timeout(180)]
REDIRECT = "http://127.0.0.1:1/callback"


def test_registration_answers_503_while_the_bucket_is_unreachable(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    bucket_server = ExitStack()
    s3 = bucket_server.enter_context(moto_server(tmp_path))
    bucket = s3.new_bucket()
    settings = ConnectorSettings.load({
        "CONNECTOR_STORE_URL": "http://127.0.0.1:9", "CONNECTOR_IDP": "static",
        "CONNECTOR_STATE_KEY": "cd" * 32, "CONNECTOR_STATE_URL": f"s3://{bucket}/connector",
        "CONNECTOR_S3_ENDPOINT_URL": s3.endpoint,
    })
    with bucket_server, TestClient(create_app(settings)) as client:
        made = client.post("/register", json={"redirect_uris": [REDIRECT], "client_name": "a"})
        assert made.status_code == 201, made.text
        assert any(key.startswith("connector/clients/") for key in s3.keys(bucket))
        bucket_server.close()  # the S3 service stops
        # A registration is refused as the server's trouble, said as such.
        refused = client.post("/register", json={"redirect_uris": [REDIRECT], "client_name": "b"})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"] == "temporarily_unavailable" and "Traceback" not in refused.text
        assert "retry-after" in refused.headers
