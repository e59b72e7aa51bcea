"""`brain-connector serve` refuses cleanly: a taken port, and several workers without a state directory."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from cli.serving.workers import bind_listener
from tests.support.processes import console_script

HOST = "127.0.0.1"


def _serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "HOME": str(tmp_path), "CONNECTOR_STORE_URL": "http://127.0.0.1:9", "CONNECTOR_IDP": "static", **env}
    return subprocess.run(
        [console_script("brain-connector"), "serve", "--host", HOST, *args],
        capture_output=True, text=True, timeout=60, env=full,
    )


def test_a_taken_port_is_a_clean_error(tmp_path: Path) -> None:
    holder = bind_listener(HOST, 0)
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        for workers in ("1", "2"):
            done = _serve(tmp_path, "--port", str(port), "--workers", workers, CONNECTOR_STATE_DIR=str(tmp_path / "state"))
            assert done.returncode != 0
            assert f"cannot listen on {HOST}:{port}" in done.stderr
            assert "Traceback" not in done.stderr + done.stdout
    finally:
        holder.close()


def test_workers_need_a_state_directory_and_a_bounded_count(tmp_path: Path) -> None:
    done = _serve(tmp_path, "--port", "8788", "--workers", "2")
    assert done.returncode != 0 and "CONNECTOR_STATE_DIR" in done.stderr and "Traceback" not in done.stderr
    done = _serve(tmp_path, "--port", "8788", "--workers", "65", CONNECTOR_STATE_DIR=str(tmp_path / "state"))
    assert done.returncode != 0 and "must be 1-64" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "state").exists()  # nothing was created
