"""bench/scale_bench.py: its figures, and both scenarios end to end at a tiny size (2 workers, SDK and bare clients)."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "scale_bench.py"


@pytest.fixture(scope="module")
def bench():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("scale_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["scale_bench"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_quantiles_are_nearest_rank_in_milliseconds(bench) -> None:  # type: ignore[no-untyped-def]
    samples = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    p50, p95, p99 = bench.quantiles_ms(samples)
    assert (round(p50, 1), round(p95), round(p99)) == (50.5, 95, 99)
    assert bench.quantiles_ms([]) == (0.0, 0.0, 0.0)


def test_a_process_groups_memory_and_cpu_add_up_its_processes(bench) -> None:  # type: ignore[no-untyped-def]
    # A leader and a child in their own process group, like a server and its workers.
    leader = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
         "'import time; x = bytearray(40 << 20); time.sleep(30)']); print('up', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        assert leader.stdout is not None and leader.stdout.readline().strip() == "up"
        for _ in range(100):
            pids = bench.group_pids(leader.pid)
            if len(pids) == 2 and sum(map(bench.rss_bytes, pids)) > 40 << 20:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert len(pids) == 2 and leader.pid in pids
        assert sum(map(bench.rss_bytes, pids)) > 40 << 20  # the child's 40 MiB counted
        assert bench.group_cpu(leader.pid) > 0
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait(timeout=30)


@pytest.mark.slow
def test_both_scenarios_run_with_two_workers_and_both_clients_and_report_no_errors(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--workers", "2", "--client", "mix", "--brain-cache", str(tmp_path / "brains"),
         "--concurrent-users", "2", "--concurrent-memories", "120", "--calls", "4",
         "--users", "6", "--memories", "80", "--rounds", "4", "--write-every", "2"],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "2 connector process(es)" in out
    # --quick sets the sizes not given: the ones above are the ones run
    assert "(a) 2 users x 4 recalls back to back, 120 memories each" in out
    assert "(b) 6 users x 4 calls (memorize every 2)" in out and ", 80 memories each" in out
    assert len(re.findall(r"errors\s+0\.0\s+runs: 0\.0\s+must be 0\n", out)) == 2
    figures = {name.strip(): float(value) for name, value in re.findall(r"^ {4}(\S.*?)\s{2,}(\d+\.\d)\s+runs:", out, re.M)}
    assert figures["recall p95 ms"] > 0 and figures["calls/s"] > 0
    assert figures["warm recall p50 ms"] > 0 and figures["memorize p50 ms"] > 0  # every 2nd call wrote
    assert figures["connector peak RSS MiB (all processes)"] > 2 * figures["connector peak RSS per user MiB"] > 0
    assert figures["store peak RSS MiB"] > 0
