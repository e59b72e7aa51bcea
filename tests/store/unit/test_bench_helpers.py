"""The store benchmark's pure helpers (the benchmark itself is run by hand, not in tests)."""

from __future__ import annotations

import importlib.util
import io
import shutil
import sys
from pathlib import Path

import multipart
import pytest

from store.archive.inspect import inspect_bytes
from tests.support.tools import needs_tool

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


# ----------------------------------------------------------------------------- yardsticks

YARDSTICKS_DIR = BENCH.parent / "yardsticks"


def _yardstick_results(bench):  # type: ignore[no-untyped-def]
    """Fixed yardstick figures: every factor is a round number."""
    results = bench.Results()
    here = {
        "litestar_304": [6_200.0, 7_750.0, 9_000.0],  # median 7,750 / 31,000 = 0.25
        "litestar_file100k": [690.0],  # / 2,300 = 0.30
        "litestar_file5m": [0.615],  # / 2.05 = 0.30
        "node_list": [4_800.0],  # / 9,600 = 0.50
        "node_304": [13_200.0],  # / 33,000 = 0.40
        "node_100k": [3_000.0],  # / 15,000 = 0.20
        "node_5m": [1.2],  # / 3.0 = 0.40
        "node_upload": [57.0],  # / 114 = 0.50
    }
    for key, values in here.items():
        for value in values:
            results.add_yardstick(key, value)
    return results


def test_machine_factors_are_median_here_over_there(bench) -> None:  # type: ignore[no-untyped-def]
    factors = bench.machine_factors(_yardstick_results(bench).yardsticks)
    expected = {"litestar_304": 0.25, "litestar_file100k": 0.30, "litestar_file5m": 0.30, "node_list": 0.50,
                "node_304": 0.40, "node_100k": 0.20, "node_5m": 0.40, "node_upload": 0.50}
    assert factors == pytest.approx(expected)
    assert bench.machine_factors({"node_304": []}) == {}  # nothing measured: no factor


def test_scale_target_uses_the_larger_factor(bench) -> None:  # type: ignore[no-untyped-def]
    factors = {"node_304": 0.40, "litestar_304": 0.25, "node_100k": 0.20, "litestar_file100k": 0.30}
    row = bench.scale_target("fresh304", "w1", 4_100.0, factors)
    assert row.factors == {"node_304": 0.40, "litestar_304": 0.25}
    assert row.factor == 0.40 and row.scaled == pytest.approx(4_000.0)  # 10,000 x 0.40
    assert row.verdict == "met"
    row = bench.scale_target("dl100k", "w2", 2_000.0, factors)
    assert row.factor == 0.30 and row.scaled == pytest.approx(2_250.0)  # Litestar's is larger here
    assert row.verdict == "NOT met"


def test_scale_target_without_yardsticks(bench) -> None:  # type: ignore[no-untyped-def]
    row = bench.scale_target("dl5m", "w1", 1.0, {"litestar_file5m": 0.30})  # Node skipped
    assert row.factors == {"node_5m": None, "litestar_file5m": 0.30} and row.factor == 0.30
    row = bench.scale_target("list", "w1", 2_000.0, {})  # nothing measured
    assert row.factor is None and row.scaled is None and row.verdict == "no yardstick"
    row = bench.scale_target("list", "w1", None, {"node_list": 0.5})
    assert row.scaled == pytest.approx(1_500.0) and row.verdict == "not measured"


def test_memory_and_correctness_targets_are_not_scaled(bench) -> None:  # type: ignore[no-untyped-def]
    factors = {"node_upload": 0.5, "node_list": 0.5}
    row = bench.scale_target("pss_peak", "w2", 100.0, factors)
    assert row.factor is None and row.factors == {} and row.scaled == row.target and row.verdict == "met"
    row = bench.scale_target("mismatch", "w1", 1.0, factors)
    assert row.scaled == 0 and row.verdict == "NOT met"


def test_scaled_targets_cover_every_target_of_the_configs(bench) -> None:  # type: ignore[no-untyped-def]
    results = _yardstick_results(bench)
    for value in (70.0, 80.0, 90.0):
        results.add("w1-enc", "upload", value)
    rows = bench.scaled_targets(results, bench.Plan(configs=("w1-enc",)))
    assert [row.metric for row in rows] == ["upload", "rss_peak", "pss_peak", "mismatch", "two_winners"]
    upload = rows[0]
    assert upload.ours == 80.0 and upload.scaled == pytest.approx(45.0)  # 90 x Node upload 0.50
    assert upload.verdict == "met"
    assert all(row.verdict == "not measured" for row in rows[1:])


def test_yardstick_report_renders_both_tables(bench) -> None:  # type: ignore[no-untyped-def]
    results = _yardstick_results(bench)
    del results.yardsticks["node_upload"]  # as if a yardstick had not been measured
    results.add("w1", "fresh304", 3_900.0)
    text = bench.yardstick_report(results, bench.Plan(configs=("w1",)))
    lines = text.splitlines()
    assert lines[0].startswith("Yardsticks on this machine") and "median of 3 run(s)" in lines[0]
    litestar = next(line for line in lines if line.startswith("Litestar 304 handler (req/s)"))
    assert litestar.split()[-4:] == ["7,750", "6,200-9,000", "31k", "0.25"]
    assert "7,750" in litestar and "6,200-9,000" in litestar and "31k" in litestar and litestar.endswith("0.25")
    uploads = next(line for line in lines if line.startswith("Node 1 MiB durable uploads"))
    assert "skipped" in uploads and uploads.endswith("-")
    fresh = next(line for line in lines if line.startswith("304 freshness path") and " w1 " in line)
    assert "Node 0.40, Litestar 0.25 -> 0.40" in fresh and ">=4,000" in fresh and fresh.endswith("NOT met")
    upload = next(line for line in lines if line.startswith("1 MiB uploads"))
    assert "Node - -> -" in upload and upload.endswith("not measured")
    memory = next(line for line in lines if line.startswith("peak PSS"))
    assert "not scaled" in memory
    assert "larger factor" in text and "upper bound" in text


def test_json_report_records_the_yardsticks(bench) -> None:  # type: ignore[no-untyped-def]
    import json

    results = _yardstick_results(bench)
    results.add("w1", "list", 2_000.0)
    data = json.loads(json.dumps(bench.json_report(results, bench.Plan(configs=("w1",)))))
    assert data["yardsticks"]["node_list"] == {"values": [4_800.0], "reference_machine": 9_600, "unit": "req/s"}
    assert data["machine_factors"]["node_list"] == pytest.approx(0.5)
    listed = next(row for row in data["scaled_targets"] if row["metric"] == "list")
    assert listed["scaled"] == pytest.approx(1_500.0) and listed["verdict"] == "met"
    assert "yardsticks" not in bench.json_report(bench.Results(), bench.Plan())


def test_sections_default_and_validation(bench) -> None:  # type: ignore[no-untyped-def]
    assert "yardstick" in bench.parse_args([]).sections
    assert bench.parse_args(["--quick", "--sections", "yardstick"]).sections == ("yardstick",)
    with pytest.raises(SystemExit):
        bench.parse_args(["--sections", "yardsticks"])


def test_download_gets_are_the_stores_four(bench) -> None:  # type: ignore[no-untyped-def]
    tests = bench.download_gets("/l", "/s", "/b", "abc")
    assert [(t.metric, t.path, t.headers, t.expect) for t in tests] == [
        ("list", "/l", {}, 200),
        ("fresh304", "/s", {"If-None-Match": '"abc"'}, 304),
        ("dl100k", "/s", {}, 200),
        ("dl5m_rps", "/b", {}, 200),
    ]


def test_litestar_yardstick_app_answers(tmp_path: Path) -> None:
    from litestar.testing import TestClient

    spec = importlib.util.spec_from_file_location("litestar_yardstick", YARDSTICKS_DIR / "litestar_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["litestar_yardstick"] = module  # Litestar resolves the handlers' annotations through it
    spec.loader.exec_module(module)
    small, big = tmp_path / "small.bin", tmp_path / "big.bin"
    small.write_bytes(b"s" * 1000)
    big.write_bytes(b"b" * 5000)
    with TestClient(app=module.create_app(small, big)) as client:
        fresh = client.get("/304")
        assert fresh.status_code == 304 and fresh.headers["etag"] == module.ETAG
        assert client.get("/file/small").content == small.read_bytes()
        assert client.get("/file/big").content == big.read_bytes()


@needs_tool(shutil.which("node") is not None, "node is not on PATH (apt-get install nodejs)")
def test_node_yardstick_server_answers_and_stores_uploads(bench, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import hashlib
    import http.client
    import json

    small, big, uploads = tmp_path / "small.bin", tmp_path / "big.bin", tmp_path / "uploads"
    small.write_bytes(b"s" * 1000)
    big.write_bytes(b"b" * 5000)
    uploads.mkdir()

    def argv(port: int) -> list[str]:
        return ["node", str(YARDSTICKS_DIR / "node_server.js"), "--port", str(port),
                "--small", str(small), "--big", str(big), "--uploads", str(uploads)]

    with bench.yardstick_server(argv, tmp_path / "node.log") as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

        def get(path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
            conn.request("GET", path, headers=headers or {})
            response = conn.getresponse()
            return response.status, response.read()

        etag = f'"{hashlib.sha256(small.read_bytes()).hexdigest()}"'
        assert get("/api/brains/small/sync", {"If-None-Match": etag}) == (304, b"")
        assert get("/api/brains/small/sync") == (200, small.read_bytes())
        assert get("/api/brains/big/sync") == (200, big.read_bytes())
        status, body = get("/api/brains")
        assert status == 200 and len(json.loads(body)) == 4
        payload = b"archive bytes" * 1000
        conn.request("PUT", "/api/brains/up0/sync", body=payload)
        response = conn.getresponse()
        assert response.status == 200
        assert json.loads(response.read())["checksum"] == hashlib.sha256(payload).hexdigest()
        assert (uploads / "up0.bin").read_bytes() == payload
        assert [p.name for p in uploads.iterdir()] == ["up0.bin"]  # no temporary file left behind
        conn.close()
