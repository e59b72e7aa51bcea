"""Connector /metrics against real processes: an MCP client signs in, memorizes and recalls; another
device writes in between, forcing a replay; every listed series moves, with no ids or tokens in it."""

from __future__ import annotations

from pathlib import Path

import httpx
import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from connector.metrics import route_label
from connector.settings import ConnectorSettings
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from tests.connector.conftest import RunningStore, brains_of, direct_memorize, store  # noqa: F401 (fixture)
from tests.connector.oauth.live import running_connector
from tests.connector.oauth.test_e2e_mcp_client import MemoryStorage, oauth_provider

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


def test_route_labels_are_fixed_paths() -> None:
    assert route_label("/mcp") == "/mcp" and route_label("/token") == "/token"
    assert route_label("/authorize/complete") == "/authorize/complete"
    assert route_label("/mcp/abc") == "other" and route_label("/static/x.css") == "other"
    # Every brain's URL under one label: no series per brain name.
    assert route_label("/mcp/brains/team") == route_label("/mcp/brains/x y") == "/mcp/brains/{brain}"


def test_metrics_settings() -> None:
    settings = ConnectorSettings.load({"CONNECTOR_STORE_URL": "http://127.0.0.1:1", "CONNECTOR_METRICS": "off",
                                       "CONNECTOR_METRICS_TOKEN": "tok"})
    assert settings.metrics is False and settings.metrics_token == "tok"
    assert ConnectorSettings.load({"CONNECTOR_STORE_URL": "http://127.0.0.1:1"}).metrics is True


def _values(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def _get(values: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return sum(v for (n, found), v in values.items() if n == name and set(labels.items()) <= found)


async def test_connector_metrics_move_with_traffic(store: RunningStore, tmp_path: Path) -> None:  # noqa: F811
    alice = store.add_user("alice")
    brain_id = brains_of(store.url, alice.token)[0]["id"]
    with running_connector(tmp_path, store.url, state_dir=tmp_path / "state",
                           extra_env={"CONNECTOR_METRICS_TOKEN": "scrape-me"}) as connector:
        mcp_url = connector.base_url + "/mcp"
        provider = oauth_provider(mcp_url, alice.token, MemoryStorage(), [])
        async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=60)) as http:
            async with Client(streamable_http_client(mcp_url, http_client=http)) as client:
                first = await client.call_tool("brain_memorize", {"content": "The release train leaves on Tuesdays."})
                assert not first.is_error, first
                # Another device writes meanwhile: the connector's next push loses the race and replays.
                direct_memorize(store.url, alice.token, brain_id, "Standups moved to 9:30.")
                second = await client.call_tool("brain_memorize", {"content": "Code freeze starts Friday noon."})
                assert not second.is_error, second
                found = await client.call_tool("brain_recall", {"query": "release train Tuesdays"})
                assert not found.is_error
                bad = await client.call_tool("brain_pin", {"id": "mem_does_not_exist"})
                assert bad.is_error

        assert httpx.get(connector.base_url + "/metrics").status_code == 401
        scraped = httpx.get(connector.base_url + "/metrics", headers={"Authorization": "Bearer scrape-me"})
        assert scraped.status_code == 200
        text = scraped.text
        assert alice.token not in text and alice.id not in text and brain_id not in text
        values = _values(text)
        assert _get(values, "brain_connector_tool_calls_total", tool="brain_memorize", outcome="ok") == 2
        assert _get(values, "brain_connector_tool_calls_total", tool="brain_recall", outcome="ok") == 1
        assert _get(values, "brain_connector_tool_calls_total", tool="brain_pin", outcome="error") == 1
        assert _get(values, "brain_connector_tool_duration_seconds_count", tool="brain_memorize") == 2
        assert _get(values, "brain_connector_pulls_total") >= 1
        assert _get(values, "brain_connector_pushes_total", outcome="stored") == 2
        assert _get(values, "brain_connector_pushes_total", outcome="conflict") == 1
        assert _get(values, "brain_connector_replays_total") == 1
        assert _get(values, "brain_connector_working_copies") == 1
        assert _get(values, "brain_connector_copies_with_unpushed_writes") == 0
        assert _get(values, "brain_connector_requests_total", method="POST", route="/mcp", status="200") >= 4
        assert _get(values, "brain_connector_requests_total", method="POST", route="/token", status="200") == 1
        assert _get(values, "brain_connector_request_duration_seconds_count", route="/mcp") >= 4
