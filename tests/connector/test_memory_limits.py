"""One user's brain cannot exhaust the connector's memory (issue 15, item 4).

A real store and a real connector process, driven by the official MCP client SDK.
Four users' brains are zip bombs (a few hundred KiB of gzip inflating to 250 MiB
of zeros, in 4 MiB files so no single header gives them away); all four are
loaded at once while another user keeps saving and recalling. The connector's
peak resident size, read from /proc, must stay within the memory budget it was
given above what it used before; the bombs get a clear tool error naming the
limit; the other user's calls all succeed. The store here is told not to refuse
such archives (STORE_INSPECT_MAX_RATIO=0): the connector must defend itself against
a store that accepts them (an older one, or one configured so).
"""

from __future__ import annotations

import asyncio
import gzip
import io
import sys
import tarfile
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest

from tests.connector.conftest import RunningStore, brains_of, running_store, upload_raw
from tests.connector.test_e2e_tools import connector, mcp_session, mint, structured

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the connector's RSS from /proc"),
]

ALL = {"brain.read", "brain.write"}
MIB = 1024 * 1024
BUDGET_MB = 256  # CONNECTOR_MAX_WORKING_COPIES_MB
BRAIN_MB = 32  # CONNECTOR_MAX_BRAIN_MB: one load reserves three times this


def zero_bomb(total: int = 250 * MIB, piece: int = 4 * MIB) -> bytes:
    """A brain archive of ``total`` bytes of zeros in ``piece``-sized files, gzip level 9."""
    out = io.BytesIO()
    zeros = bytes(piece)
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0) as packed:
        with tarfile.open(fileobj=packed, mode="w|") as tar:
            for number in range(total // piece):
                info = tarfile.TarInfo(f"notes/zeros-{number:03d}.md")
                info.size = piece
                tar.addfile(info, io.BytesIO(zeros))
    return out.getvalue()


def rss_kib(pid: int) -> tuple[int, int]:
    """(current, peak) resident size of a process in KiB, from /proc/<pid>/status."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def _text(result: Any) -> str:
    return "\n".join(item.text for item in result.content if item.type == "text")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RunningStore]:
    """A real store that accepts archives of any inflation ratio."""
    with running_store(tmp_path, env={"STORE_INSPECT_MAX_RATIO": "0"}) as running:
        yield running


def test_four_parallel_bomb_loads_stay_within_the_budget(store: RunningStore, tmp_path: Path) -> None:
    bomb = zero_bomb()
    assert len(bomb) < 1 * MIB  # the finding: ~248 KiB for 250 MiB
    bombers = [store.add_user(f"bomb{number}") for number in range(4)]
    for user in bombers:
        brain_id = brains_of(store.url, user.token)[0]["id"]
        assert upload_raw(store.url, user.token, brain_id, bomb).status_code == 200
    carol = store.add_user("carol")
    env = {
        "CONNECTOR_MAX_WORKING_COPIES_MB": str(BUDGET_MB),
        "CONNECTOR_MAX_BRAIN_MB": str(BRAIN_MB),
        "CONNECTOR_MAX_CONCURRENT_LOADS": "2",
        "CONNECTOR_MCP_RATE_PER_MIN": "0",
    }

    async def scenario(base: str, pid: int) -> tuple[int, int, int]:
        async with mcp_session(base + "/mcp", mint(base, carol, ALL)) as client:
            saved = structured(await client.call_tool("brain_memorize", {"content": "Carol's team ships on Tuesdays"}))
            assert saved["synced"] is True
            structured(await client.call_tool("brain_recall", {"query": "ships"}))
            before, _ = rss_kib(pid)

            async def bomb_recall(user: Any) -> Any:
                async with mcp_session(base + "/mcp", mint(base, user, ALL)) as bomber:
                    return await bomber.call_tool("brain_recall", {"query": "zeros"})

            async def carol_keeps_working() -> list[float]:
                took = []
                for turn in range(6):
                    began = time.monotonic()
                    if turn % 2:
                        found = structured(await client.call_tool("brain_recall", {"query": "Tuesdays"}))
                        assert found["results"], found
                    else:
                        wrote = structured(await client.call_tool("brain_memorize", {"content": f"Carol's note {turn}"}))
                        assert wrote["synced"] is True
                    took.append(time.monotonic() - began)
                return took

            *refused, took = await asyncio.gather(*(bomb_recall(user) for user in bombers), carol_keeps_working())
            for result in refused:
                assert result.is_error
                assert "larger than this connector accepts" in _text(result) and f"{BRAIN_MB} MiB" in _text(result)
            assert max(took) < 20, took
            after, peak = rss_kib(pid)
            return before, peak, after

    with connector(tmp_path, store, env=env) as server:
        before, peak, after = asyncio.run(scenario(server.base_url, server.process.pid))
    grown_mib = (peak - before) / 1024
    print(f"connector RSS: before {before / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, after {after / 1024:.0f} MiB")
    # The budget bounds what loads and copies add; what the process held before is the margin.
    assert grown_mib <= BUDGET_MB, f"peak RSS grew by {grown_mib:.0f} MiB, budget {BUDGET_MB} MiB"
    # Refused loads give their memory back.
    assert (after - before) / 1024 <= 64, f"RSS stayed {(after - before) / 1024:.0f} MiB above where it was"
