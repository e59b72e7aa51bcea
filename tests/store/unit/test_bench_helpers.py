"""The store benchmark's pure helpers (the benchmark itself is run by hand, not in tests)."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import multipart
import pytest

from store.archive.inspect import inspect_bytes

BENCH = Path(__file__).resolve().parents[3] / "bench" / "store_bench.py"


@pytest.fixture(scope="module")
def bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("store_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["store_bench"] = module
    spec.loader.exec_module(module)
    return module


WRK_OUTPUT = """Running 2s test @ http://127.0.0.1:1234/api/brains
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.10ms    1.02ms  20.11ms   90.00%
    Req/Sec    10.35k   512.00    11.00k    80.00%
  20700 requests in 2.00s, 6.81MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 5
Requests/sec:  10345.67
Transfer/sec:      3.40MB
"""


def test_parse_wrk(bench) -> None:  # type: ignore[no-untyped-def]
    rps, errors = bench._parse_wrk(WRK_OUTPUT)
    assert rps == pytest.approx(10345.67)
    assert errors == 5 + 1 + 2
    with pytest.raises(RuntimeError):
        bench._parse_wrk("garbage")


def test_archives_are_valid_and_sized(bench) -> None:  # type: ignore[no-untyped-def]
    archive = bench.make_archive(100 * 1024, 16, seed=1)
    assert 100 * 1024 <= len(archive) <= 110 * 1024  # incompressible content
    assert inspect_bytes(archive).file_count == 16
    assert bench.make_archive(100 * 1024, 16, seed=1) == archive  # deterministic
    assert bench.make_archive(100 * 1024, 16, seed=2) != archive


def test_big_archive_written_to_disk(bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "big.tar.gz"
    bench.write_big_archive(path, 8 * 1024 * 1024, seed=3)
    summary = inspect_bytes(path.read_bytes())
    assert summary.file_count == 2 and path.stat().st_size > 8 * 1024 * 1024


def test_multipart_body_carries_the_brain_field(bench) -> None:  # type: ignore[no-untyped-def]
    archive = bench.make_archive(4096, 2, seed=4)
    body = bench.multipart_body(archive)
    head, tail, total = bench.multipart_parts(len(archive))
    assert total == len(body) and body.startswith(head) and body.endswith(tail)
    parser = multipart.MultipartParser(io.BytesIO(body), bench.BOUNDARY)
    parts = list(parser)
    assert [p.name for p in parts] == ["brain"]
    assert parts[0].raw == archive


def test_report_marks_targets(bench) -> None:  # type: ignore[no-untyped-def]
    results = bench.Results()
    for value in (3100.0, 2900.0, 3300.0):
        results.add("w1", "list", value)
    results.add("w1", "rss_peak", 200.0)
    results.notes.append("w1 run 1: something odd")
    text = bench.report(results, bench.Plan(configs=("w1",)))
    list_line = next(line for line in text.splitlines() if line.startswith("GET /api/brains"))
    assert "3,100" in list_line and list_line.rstrip().endswith("yes")
    rss_line = next(line for line in text.splitlines() if line.startswith("peak RSS"))
    assert rss_line.rstrip().endswith("NO")
    assert "something odd" in text


def test_python_load_generator_counts_answers(bench) -> None:  # type: ignore[no-untyped-def]
    import asyncio
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802
            if self.headers.get("If-None-Match") == '"x"':
                self.send_response(304)
                self.end_headers()
                return
            body = b"hello" * 100
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        rps, errors = asyncio.run(bench._py_load(port, "/", {}, 0.5, 4, 200))
        assert rps > 0 and errors == 0
        rps, errors = asyncio.run(bench._py_load(port, "/", {"If-None-Match": '"x"'}, 0.5, 4, 304))
        assert rps > 0 and errors == 0
        _, errors = asyncio.run(bench._py_load(port, "/", {}, 0.3, 2, 304))
        assert errors > 0  # a 200 where a 304 was expected counts as an error
    finally:
        server.shutdown()
        server.server_close()
