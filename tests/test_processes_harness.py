"""The test harness starts servers and waits for *them*, not for whatever answers on their port."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import free_port, run_server, wait_for_http


def test_another_process_answering_on_the_port_does_not_pass_for_the_server(tmp_path: Path) -> None:
    port = free_port()
    other = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/", other, timeout=30)  # its own server: passes
        # A "server" that never listens (as one whose bind failed): the other's answers do not count.
        with pytest.raises(RuntimeError, match="exited with code 0"):
            with run_server([sys.executable, "-c", "import time; time.sleep(2)"], port=port,
                            log_path=tmp_path / "never.log", health_path="/", timeout=20):
                pass
    finally:
        other.kill()
        other.wait(timeout=30)
