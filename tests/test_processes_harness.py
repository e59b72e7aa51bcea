"""The test harness starts servers and waits for *them*, not for whatever answers on their port;
a server or command it forks from a helper (tests/support/forkserver.py) ends as a new process would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.workers import pid_alive
from tests.support.forkserver import ForkedProcess, fork_server_for
from tests.support.processes import console_script, free_port, run_command, run_server, wait_for_http


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


def test_a_forked_command_ends_as_a_new_process_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bad.json").write_text('{"x": ')
    runs = [[console_script("brain-connector"), "import", str(tmp_path / "brain"), str(tmp_path / name),
             "--now", "2026-02-03T04:05:06.000Z"] for name in ("bad.json", "missing.md")]
    for argv in runs:
        assert fork_server_for(argv, dict(os.environ)) is not None
        forked = run_command(argv, timeout=120)
        monkeypatch.setenv("BRAIN_TESTS_NO_FORK", "1")
        assert fork_server_for(argv, dict(os.environ)) is None
        ordinary = run_command(argv, timeout=120)
        monkeypatch.delenv("BRAIN_TESTS_NO_FORK")
        assert forked.returncode in (1, 2) and "Traceback" not in forked.stderr
        assert (forked.returncode, forked.stdout, forked.stderr) == (ordinary.returncode, ordinary.stdout, ordinary.stderr)
    assert not (tmp_path / "brain").exists()


def test_only_the_programs_own_settings_may_differ_in_a_fork() -> None:
    serve = [console_script("brain-connector"), "serve"]
    assert fork_server_for(serve, {**os.environ, "CONNECTOR_PORT": "1", "STORE_QUIET": "1"}) is not None
    for name in ("PYTHONHASHSEED", "LD_PRELOAD", "OPENBLAS_NUM_THREADS", "TZ"):
        assert fork_server_for(serve, {**os.environ, name: "7"}) is None, name
    assert fork_server_for([console_script("brain-connector"), "recall"], dict(os.environ)) is None
    assert fork_server_for([sys.executable, "-c", "pass"], dict(os.environ)) is None


def test_openmp_settings_may_differ_as_no_helper_loads_openmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test process that loaded the e5 engine or the sentence model has OMP_* or KMP_* set
    (connector/engine/recall/e5.py, threadpoolctl); its starts are still forked, as the helper
    never loads an OpenMP runtime that reads them."""
    argv = [console_script("brain-connector"), "import", str(tmp_path / "brain"), str(tmp_path / "missing.md")]
    run_command(argv, timeout=120)  # the helper runs from here on
    helper = fork_server_for(argv, dict(os.environ))
    assert helper is not None and helper.pid is not None
    maps = Path(f"/proc/{helper.pid}/maps").read_text()
    assert "libgomp" not in maps and "libiomp" not in maps
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("KMP_DUPLICATE_LIB_OK", "True")
    assert fork_server_for(argv, dict(os.environ)) is helper


def test_a_forked_server_leads_its_own_session_and_stops_like_a_new_one(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    codes = []
    for fork in (True, False):
        if not fork:
            monkeypatch.setenv("BRAIN_TESTS_NO_FORK", "1")
        port = free_port()
        env = {"CONNECTOR_IDP": "static", "CONNECTOR_PORT": str(port), "CONNECTOR_STORE_URL": "http://127.0.0.1:9",
               "CONNECTOR_STATE_DIR": str(tmp_path / f"state-{port}")}
        with run_server([console_script("brain-connector"), "serve"], port=port, env=env,
                        log_path=tmp_path / f"{port}.log", health_path="/health/live") as server:
            assert isinstance(server.process, ForkedProcess) is fork
            assert os.getsid(server.process.pid) == server.process.pid
            assert f"brain-connector listening on http://127.0.0.1:{port}" in server.log()
            server.process.send_signal(signal.SIGTERM)
            codes.append(server.process.wait(timeout=60))
    assert codes[0] == codes[1] == -signal.SIGTERM  # uvicorn ends by the signal once it has shut down


def test_a_killed_fork_polls_as_ended_once_it_is_dead(tmp_path: Path) -> None:
    """As Popen.poll: once the process is dead its code is there (the helper reaps it a little later)."""
    port = free_port()
    env = {"CONNECTOR_IDP": "static", "CONNECTOR_PORT": str(port), "CONNECTOR_STORE_URL": "http://127.0.0.1:9"}
    with run_server([console_script("brain-connector"), "serve"], port=port, env=env,
                    log_path=tmp_path / "connector.log", health_path="/health/live") as server:
        assert isinstance(server.process, ForkedProcess) and server.process.poll() is None
        os.kill(server.process.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        # Until dead: a zombie, or reaped already (its /proc entry can go between two reads of it).
        while pid_alive(server.process.pid):
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert server.process.poll() == -signal.SIGKILL


def test_parallel_workers_pick_ports_from_their_own_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.processes import _worker_share

    shares = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
        shares.append(_worker_share(20000, 32768))
    assert shares[0][0] == 20000 and all(low < high for low, high in shares)
    assert all(shares[n][1] <= shares[n + 1][0] for n in range(2)), shares  # disjoint
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert _worker_share(20000, 32768) == (20000, 32768)  # one process: the whole range
