#!/usr/bin/env python3
"""Benchmark of the store against the reference store's figures.

Starts our store (``brain-store serve``) on a temporary data directory, once per
configuration (``--workers 1``/``2``, encryption off/on), with rate limits off, and
measures, for ``--runs`` runs (medians printed):

* ``GET /api/brains`` req/s, the 304 freshness path req/s, 100 KiB and 5 MiB
  downloads (req/s and GiB/s): ``wrk -t1 -c32`` (Python fallback without wrk);
* 1 MiB uploads with 8 Python client processes (uploads/s, fsync on);
* peak RSS of all server processes while 8 clients each upload a 40 MiB archive;
* correctness under load: ETag/X-Checksum vs body mismatches while a writer
  alternates two archives and 8 readers download; rounds of 16 racing ``If-Match``
  uploads with more than one winner.

Once per run (not per configuration), section ``yardstick`` measures with the same load
the yardsticks issue #2 quotes for the reference machine (a trivial Litestar app) and a
trivial Node server (an upper bound of the Node reference store here), and prints a
second table: how fast this machine is against the reference machine, and every target
scaled by that factor.

Usage::

    .venv/bin/python bench/store_bench.py              # 3 runs, all configurations
    .venv/bin/python bench/store_bench.py --quick      # a short smoke run
    .venv/bin/python bench/store_bench.py --configs w1,w2 --runs 5 --json out.json
    .venv/bin/python bench/store_bench.py --quick --sections yardstick

See bench/README.md for what each figure means and how to read the table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import http.client
import io
import json
import multiprocessing
import os
import platform
import random
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KIB = 1024
MIB = 1024 * 1024
GIB = 1024 * MIB
HOST = "127.0.0.1"

# Reference store figures (Node, one process, same kind of machine) and our targets.
# key: (label, unit, reference, {config: target}, higher_is_better)
METRICS: dict[str, tuple[str, str, str, dict[str, float], bool]] = {
    "list": ("GET /api/brains", "req/s", "9.6-10.7k", {"w1": 3000, "w2": 5000}, True),
    "fresh304": ("304 freshness path", "req/s", "33-36k", {"w1": 10_000, "w2": 17_000}, True),
    "dl100k": ("100 KiB download", "req/s", "15.0-15.7k", {"w1": 7500, "w2": 7500}, True),
    "dl5m_rps": ("5 MiB download", "req/s", "-", {}, True),
    "dl5m": ("5 MiB download", "GiB/s", "3.0-3.6", {"w1": 2.5, "w2": 2.5}, True),
    "upload": ("1 MiB uploads, 8 clients", "up/s", "114-155 (109-128 enc)", {"w1": 110, "w2": 150, "w1-enc": 90}, True),
    "rss_idle": ("server RSS, idle", "MiB", "-", {}, False),
    "pss_idle": ("server PSS, idle", "MiB", "-", {}, False),
    "rss_peak": ("peak RSS, 8 x 40 MiB uploads", "MiB", "772-777", {c: 150e6 / MIB for c in ("w1", "w2", "w1-enc", "w2-enc")}, False),
    # The memory verdict that matters is PSS: "all server processes together" counts each page
    # once, while summed RSS counts the interpreter pages the workers share once per worker.
    "pss_peak": ("peak PSS (shared pages once)", "MiB", "-", {c: 150e6 / MIB for c in ("w1", "w2", "w1-enc", "w2-enc")}, False),
    "mismatch": ("ETag/body mismatches", "count", "> 0", {c: 0 for c in ("w1", "w2", "w1-enc", "w2-enc")}, False),
    "two_winners": ("rounds with two winners", "count", "> 0", {c: 0 for c in ("w1", "w2", "w1-enc", "w2-enc")}, False),
}
CONFIGS = {"w1": (1, False), "w2": (2, False), "w1-enc": (1, True), "w2-enc": (2, True)}
STORE_SECTIONS = ("get", "upload", "memory", "consistency", "race")  # run once per configuration
SECTIONS = ("yardstick", *STORE_SECTIONS)  # the yardstick section runs once per run, before the configurations
YARDSTICK_DIR = Path(__file__).resolve().parent / "yardsticks"


@dataclass(frozen=True)
class Yardstick:
    """A figure measured both here and on the reference machine (issue #2): their ratio is the machine factor."""

    label: str
    unit: str
    there: float  # figure on the reference machine; for a range its low end (the larger, stricter factor)
    there_text: str  # as issue #2 quotes it


# Litestar: the trivial Litestar app. Node: a trivial Node server here, against the
# reference store's own figures there (the trivial server does less, so it is an upper bound).
YARDSTICKS: dict[str, Yardstick] = {
    "litestar_304": Yardstick("Litestar 304 handler", "req/s", 31_000, "31k"),
    "litestar_file100k": Yardstick("Litestar File(...) 100 KiB", "req/s", 2_300, "2.3k"),
    "litestar_file5m": Yardstick("Litestar File(...) 5 MiB", "GiB/s", 2.05, "2.05"),
    "node_list": Yardstick("Node JSON list of 4 brains", "req/s", 9_600, "9.6-10.7k (ref. store)"),
    "node_304": Yardstick("Node 304 with ETag", "req/s", 33_000, "33-36k (ref. store)"),
    "node_100k": Yardstick("Node 100 KiB from memory", "req/s", 15_000, "15.0-15.7k (ref. store)"),
    "node_5m": Yardstick("Node 5 MiB from memory", "GiB/s", 3.0, "3.0-3.6 (ref. store)"),
    "node_upload": Yardstick("Node 1 MiB durable uploads, 8 clients", "up/s", 114, "114-155 (ref. store)"),
}
# Which yardsticks scale which target; targets not named here (memory, correctness) are not scaled.
SCALED_BY: dict[str, tuple[str, ...]] = {
    "list": ("node_list",),
    "fresh304": ("node_304", "litestar_304"),
    "dl100k": ("node_100k", "litestar_file100k"),
    "dl5m": ("node_5m", "litestar_file5m"),
    "upload": ("node_upload",),
}


@dataclass
class Plan:
    """What to run and for how long."""

    runs: int = 3
    duration: float = 10.0
    configs: tuple[str, ...] = ("w1", "w2", "w1-enc", "w2-enc")
    sections: tuple[str, ...] = SECTIONS
    big_upload_mib: int = 40
    clients: int = 8
    race_rounds: int = 20
    race_writers: int = 16
    upload_files: int = 64
    use_wrk: bool = True
    store_cmd: str = ""
    quiet_server: bool = True
    keep_data: bool = False
    json_path: Path | None = None


@dataclass
class Results:
    """Per configuration, per metric, one value per run (and notes)."""

    values: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    yardsticks: dict[str, list[float]] = field(default_factory=dict)  # yardstick key -> one value per run

    def add(self, config: str, metric: str, value: float) -> None:
        self.values.setdefault(config, {}).setdefault(metric, []).append(value)

    def add_yardstick(self, key: str, value: float) -> None:
        self.yardsticks.setdefault(key, []).append(value)


# ----------------------------------------------------------------------------- archives

UPLOAD_POOL = 8  # distinct 1 MiB archives each upload client cycles through


def make_archive(total: int, files: int, seed: int) -> bytes:
    """A tar.gz of ``files`` incompressible files totalling about ``total`` bytes (a brain-like tree)."""
    rng = _Rng(seed)
    buffer = io.BytesIO()
    each = max(1, total // max(1, files))
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
        dirs: set[str] = set()
        for index in range(files):
            directory = f"memories/{index % 8}"
            if directory not in dirs:
                dirs.add(directory)
                info = tarfile.TarInfo(directory)
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                archive.addfile(info)
            data = rng.bytes(each)
            info = tarfile.TarInfo(f"{directory}/m{index:05d}.md")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def write_big_archive(path: Path, total: int, seed: int) -> None:
    """A large tar.gz written straight to disk (never held whole in memory)."""
    rng = _Rng(seed)
    with tarfile.open(path, mode="w:gz", compresslevel=1) as archive:
        for index in range(max(1, total // (4 * MIB))):
            data = rng.bytes(4 * MIB)
            info = tarfile.TarInfo(f"blobs/b{index:04d}.bin")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


class _Rng:
    """Deterministic incompressible bytes (archives are stored, not shrunk, by gzip)."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def bytes(self, size: int) -> bytes:
        return self._random.randbytes(size)


# ----------------------------------------------------------------------------- HTTP helpers


BOUNDARY = "brainbench" + secrets.token_hex(8)


def multipart_parts(size: int) -> tuple[bytes, bytes, int]:
    """Preamble, epilogue and total length of a multipart body holding one ``brain`` file."""
    head = (
        f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"brain\"; filename=\"brain.tar.gz\"\r\n"
        "Content-Type: application/gzip\r\n\r\n"
    ).encode()
    tail = f"\r\n--{BOUNDARY}--\r\n".encode()
    return head, tail, len(head) + size + len(tail)


def multipart_body(archive: bytes) -> bytes:
    head, tail, _ = multipart_parts(len(archive))
    return head + archive + tail


class Client:
    """A keep-alive HTTP/1.1 connection to the store with a bearer token."""

    def __init__(self, port: int, token: str, timeout: float = 120.0) -> None:
        self.port = port
        self.token = token
        self.timeout = timeout
        self.conn = http.client.HTTPConnection(HOST, port, timeout=timeout)

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        all_headers = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=body, headers=all_headers)
                response = self.conn.getresponse()
                data = response.read()
                return response.status, {k.lower(): v for k, v in response.getheaders()}, data
            except (ConnectionError, http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = http.client.HTTPConnection(HOST, self.port, timeout=self.timeout)
                if attempt or not isinstance(body, (bytes, type(None))):
                    raise
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, payload: Any = None) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        status, _, data = self.request(method, path, body, headers)
        if status >= 300:
            raise RuntimeError(f"{method} {path} -> {status}: {data[:200]!r}")
        return json.loads(data) if data else None

    def upload(self, brain_id: str, archive: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        status, _, data = self.request(
            "PUT",
            f"/api/brains/{brain_id}/sync",
            multipart_body(archive),
            {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}", **(headers or {})},
        )
        return status, data

    def close(self) -> None:
        self.conn.close()


# ----------------------------------------------------------------------------- the server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def start_process(argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own process group (so stopping it reaches its children), output to ``log_path``."""
    with log_path.open("ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                start_new_session=True)


def wait_healthy(process: subprocess.Popen[bytes], port: int, log_path: Path, timeout: float = 60.0) -> None:
    """Wait until ``GET /health`` on ``port`` answers 200; raise with the log's tail if the process dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            command = " ".join(map(str, process.args))[:200]
            raise RuntimeError(f"{command} exited ({process.returncode}):\n{log_path.read_text()[-3000:]}")
        try:
            conn = http.client.HTTPConnection(HOST, port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                conn.close()
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"port {port} did not answer /health within {timeout:.0f} s")


def stop_process(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM the process group started by :func:`start_process`; SIGKILL it after 30 s."""
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def store_command(plan: Plan) -> list[str]:
    if plan.store_cmd:
        return plan.store_cmd.split()
    candidate = Path(sys.executable).parent / "brain-store"
    if candidate.exists():
        return [str(candidate)]
    found = shutil.which("brain-store")
    if found:
        return [found]
    raise SystemExit("brain-store not found: run from the project venv (make venv) or pass --store-cmd")


class Server:
    """Our store as a real process group on loopback."""

    def __init__(self, plan: Plan, workers: int, encrypted: bool, data_dir: Path) -> None:
        self.port = free_port()
        self.data_dir = data_dir
        self.env = {**os.environ, "STORE_RATE_LIMITS": "off", "STORE_DATA_DIR": str(data_dir)}
        if plan.quiet_server:
            self.env["STORE_QUIET"] = "1"
        if encrypted:
            self.env["STORE_ENCRYPTION_KEY"] = secrets.token_hex(32)
        else:
            self.env.pop("STORE_ENCRYPTION_KEY", None)
        self.cmd = store_command(plan)
        self.workers = workers
        self.log_path = data_dir.parent / f"server-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def add_user(self, name: str) -> str:
        out = subprocess.run(
            [*self.cmd, "user", "add", name, "--data", str(self.data_dir)],
            env=self.env, capture_output=True, text=True, timeout=120, check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"user add failed: {out.stderr or out.stdout}")
        return out.stdout.strip().splitlines()[-1].strip()

    def start(self) -> None:
        argv = [*self.cmd, "serve", "--host", HOST, "--port", str(self.port), "--data", str(self.data_dir),
                "--workers", str(self.workers)]
        self.process = start_process(argv, self.log_path, self.env)
        wait_healthy(self.process, self.port, self.log_path)
        if self.workers > 1:
            time.sleep(1.0)  # let every worker finish starting

    def pids(self) -> list[int]:
        """Every process of the server's process group (uvicorn workers included)."""
        if self.process is None:
            return []
        group = self.process.pid
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[-1].split()
            if len(fields) > 2 and int(fields[2]) == group:
                found.append(int(entry))
        return found

    def rss_bytes(self, pids: list[int] | None = None) -> int:
        """Summed VmRSS of ``pids`` (default: the whole process group) in bytes."""
        return self.memory(pids)[0]

    def memory(self, pids: list[int] | None = None) -> tuple[int, int]:
        """(summed RSS, summed PSS) of ``pids`` in bytes; PSS counts shared pages once."""
        rss = pss = 0
        for pid in self.pids() if pids is None else pids:
            try:
                with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
                    for line in rollup:
                        if line.startswith(b"Rss:"):
                            rss += int(line.split()[1]) * 1024
                        elif line.startswith(b"Pss:"):
                            pss += int(line.split()[1]) * 1024
                            break
            except OSError:
                continue
        return rss, pss

    def stop(self) -> None:
        stop_process(self.process)


class RssSampler:
    """Samples the summed RSS of the server's processes in a background thread."""

    def __init__(self, server: Server, interval: float = 0.01) -> None:
        self.server = server
        self.interval = interval
        self.peak = 0
        self.peak_pss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        # Scanning /proc for the group is the costly part: refresh the pid list every
        # half second only, and read just those processes' status files in between.
        pids = self.server.pids()
        refreshed = time.monotonic()
        while not self._stop.is_set():
            if time.monotonic() - refreshed > 0.5:
                pids = self.server.pids()
                refreshed = time.monotonic()
            rss, pss = self.server.memory(pids)
            self.peak = max(self.peak, rss)
            self.peak_pss = max(self.peak_pss, pss)
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        rss, pss = self.server.memory()
        self.peak = max(self.peak, rss)
        self.peak_pss = max(self.peak_pss, pss)


# ----------------------------------------------------------------------------- load generators


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def _parse_wrk(text: str) -> tuple[float, int]:
    match = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if not match:
        raise RuntimeError(f"could not parse wrk output:\n{text}")
    errors = 0
    for pattern in (r"Non-2xx or 3xx responses:\s+(\d+)", r"Socket errors:.*?timeout (\d+)"):
        found = re.search(pattern, text)
        if found:
            errors += int(found.group(1))
    found = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+)", text)
    if found:
        errors += sum(int(x) for x in found.groups())
    return float(match.group(1)), errors


def load_get(port: int, path: str, headers: dict[str, str], duration: float, use_wrk: bool,
             expect: int) -> tuple[float, int]:
    """Requests per second for a GET under 32 concurrent keep-alive connections, and errors."""
    if use_wrk:
        argv = ["wrk", "-t1", "-c32", f"-d{max(1, round(duration))}s", "--timeout", "30s"]
        for name, value in headers.items():
            argv += ["-H", f"{name}: {value}"]
        argv.append(f"http://{HOST}:{port}{path}")
        out = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60, check=False)
        return _parse_wrk(out.stdout)
    return asyncio.run(_py_load(port, path, headers, duration, 32, expect))


async def _py_load(port: int, path: str, headers: dict[str, str], duration: float, connections: int,
                   expect: int) -> tuple[float, int]:
    """A small keep-alive HTTP/1.1 load generator (fallback without wrk; figures are lower bounds)."""
    request = (f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
               + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
    deadline = time.monotonic() + duration
    counts = [0, 0]

    async def one() -> None:
        reader, writer = await asyncio.open_connection(HOST, port)
        try:
            while time.monotonic() < deadline:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                if length:
                    await reader.readexactly(length)
                counts[0 if status == expect else 1] += 1
        finally:
            writer.close()

    started = time.monotonic()
    await asyncio.gather(*(one() for _ in range(connections)))
    return counts[0] / (time.monotonic() - started), counts[1]


def _clients(target: Callable[..., Any], argsets: Iterable[tuple[Any, ...]]) -> list[Any]:
    """Run ``target(*args, queue)`` in separate processes (fork) and collect their results."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    processes = [context.Process(target=_child, args=(target, args, queue)) for args in argsets]
    for process in processes:
        process.start()
    results = [queue.get(timeout=900) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    failures = [r for r in results if isinstance(r, str)]
    if failures:
        raise RuntimeError(f"client failed: {failures[0]}")
    return results


def _child(target: Callable[..., Any], args: tuple[Any, ...], queue: Any) -> None:
    try:
        queue.put(target(*args))
    except Exception as exc:  # reported to the parent, which raises
        queue.put(f"{type(exc).__name__}: {exc}")


def _upload_loop(port: int, token: str, brain_id: str, archives: list[bytes], start_at: float,
                 duration: float) -> tuple[int, int]:
    client = Client(port, token)
    bodies = [multipart_body(a) for a in archives]
    headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    ok = failed = 0
    time.sleep(max(0.0, start_at - time.time()))
    end = start_at + duration
    index = 0
    while time.time() < end:
        status, _, _ = client.request("PUT", f"/api/brains/{brain_id}/sync", bodies[index % len(bodies)], headers)
        index += 1
        if status == 200:
            ok += 1
        else:
            failed += 1
    client.close()
    return ok, failed


def _big_upload(port: int, token: str, brain_id: str, path: str, start_at: float) -> tuple[int, int]:
    size = os.path.getsize(path)
    head, tail, total = multipart_parts(size)

    def body() -> Iterator[bytes]:
        yield head
        with open(path, "rb") as f:
            while chunk := f.read(256 * KIB):
                yield chunk
        yield tail

    client = Client(port, token, timeout=600)
    time.sleep(max(0.0, start_at - time.time()))
    status, _, _ = client.request("PUT", f"/api/brains/{brain_id}/sync", body(),
                                  {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
                                   "Content-Length": str(total)})
    client.close()
    return (1, 0) if status == 200 else (0, 1)


def _reader_loop(port: int, token: str, brain_id: str, allowed: list[str], start_at: float,
                 duration: float) -> tuple[int, int, int]:
    client = Client(port, token)
    reads = mismatches = errors = 0
    time.sleep(max(0.0, start_at - time.time()))
    end = start_at + duration
    while time.time() < end:
        status, headers, body = client.request("GET", f"/api/brains/{brain_id}/sync")
        if status != 200:
            errors += 1
            continue
        reads += 1
        digest = hashlib.sha256(body).hexdigest()
        etag = headers.get("etag", "").strip('"')
        if digest != etag or digest != headers.get("x-checksum") or digest not in allowed:
            mismatches += 1
    client.close()
    return reads, mismatches, errors


def _writer_loop(port: int, token: str, brain_id: str, archives: list[bytes], start_at: float,
                 duration: float) -> tuple[int, int]:
    return _upload_loop(port, token, brain_id, archives, start_at, duration)


# ----------------------------------------------------------------------------- one configuration


@dataclass
class Fixture:
    reader_token: str
    brain_small: str
    brain_big: str
    brain_consistency: str
    brain_race: str
    small_checksum: str
    upload_users: list[tuple[str, str]]  # (token, brain id) per upload client


def prepare(server: Server, plan: Plan, small: bytes, big: bytes) -> Fixture:
    """Users and brains: a reader with four brains, and one user per upload client."""
    reader = server.add_user("bench-reader")
    uploaders = [server.add_user(f"bench-up{i}") for i in range(plan.clients)]
    server.start()
    client = Client(server.port, reader)
    brains = client.json("GET", "/api/brains")
    small_id = brains[0]["id"]
    big_id = client.json("POST", "/api/brains", {"name": "big"})["id"]
    consistency_id = client.json("POST", "/api/brains", {"name": "consistency"})["id"]
    race_id = client.json("POST", "/api/brains", {"name": "race"})["id"]
    for brain_id, archive in ((small_id, small), (big_id, big)):
        status, data = client.upload(brain_id, archive)
        if status != 200:
            raise RuntimeError(f"seed upload -> {status}: {data[:200]!r}")
    client.close()
    users = []
    for token in uploaders:
        up = Client(server.port, token)
        users.append((token, up.json("GET", "/api/brains")[0]["id"]))
        up.close()
    return Fixture(reader, small_id, big_id, consistency_id, race_id, hashlib.sha256(small).hexdigest(), users)


def bench_config(name: str, plan: Plan, results: Results, workdir: Path, archives: dict[str, Any]) -> None:
    workers, encrypted = CONFIGS[name]
    data_dir = workdir / f"data-{name}"
    data_dir.mkdir(mode=0o700)
    server = Server(plan, workers, encrypted, data_dir)
    print(f"\n== {name}: --workers {workers}, encryption {'on' if encrypted else 'off'} (port {server.port})", flush=True)
    try:
        fx = prepare(server, plan, archives["small"], archives["big"])
        idle_rss, idle_pss = server.memory()
        results.add(name, "rss_idle", idle_rss / MIB)
        results.add(name, "pss_idle", idle_pss / MIB)
        auth = {"Authorization": f"Bearer {fx.reader_token}"}
        for run in range(plan.runs):
            print(f"   run {run + 1}/{plan.runs}", flush=True)
            if "get" in plan.sections:
                for metric, value in store_gets(server.port, fx, auth, archives, plan, f"{name} run {run + 1}",
                                                results.notes).items():
                    results.add(name, metric, value)
            if "upload" in plan.sections:
                rate = measure_uploads(server.port, fx.upload_users, archives["upload"], plan.duration,
                                       f"{name} run {run + 1}", results.notes)
                results.add(name, "upload", rate)
            if "memory" in plan.sections:
                start_at = time.time() + 1.0
                argsets = [(server.port, token, brain, str(archives["big_path"]), start_at)
                           for token, brain in fx.upload_users]
                with RssSampler(server) as sampler:
                    outcome = _clients(_big_upload, argsets)
                failed = sum(r[1] for r in outcome)
                results.add(name, "rss_peak", sampler.peak / MIB)
                results.add(name, "pss_peak", sampler.peak_pss / MIB)
                if failed:
                    results.notes.append(f"{name} run {run + 1}: big uploads: {failed} of {len(outcome)} failed")
                print(f"     peak RSS   {sampler.peak / MIB:10.1f} MiB, PSS {sampler.peak_pss / MIB:.1f} MiB "
                      f"({failed} failed uploads)", flush=True)
            if "consistency" in plan.sections:
                pair = archives["pair"]
                allowed = [hashlib.sha256(a).hexdigest() for a in pair]
                client = Client(server.port, fx.reader_token)
                client.upload(fx.brain_consistency, pair[0])
                client.close()
                start_at = time.time() + 1.0
                span = max(2.0, plan.duration)
                argsets: list[tuple[Any, ...]] = [
                    (server.port, fx.reader_token, fx.brain_consistency, allowed, start_at, span) for _ in range(plan.clients)
                ]
                context = multiprocessing.get_context("fork")
                writer_queue = context.Queue()
                writer = context.Process(target=_child, args=(
                    _writer_loop, (server.port, fx.reader_token, fx.brain_consistency, pair, start_at, span), writer_queue))
                writer.start()
                outcome = _clients(_reader_loop, argsets)
                written = writer_queue.get(timeout=900)
                writer.join(timeout=60)
                reads = sum(r[0] for r in outcome)
                mismatches = sum(r[1] for r in outcome)
                errors = sum(r[2] for r in outcome)
                results.add(name, "mismatch", mismatches)
                if errors:
                    results.notes.append(f"{name} run {run + 1}: consistency: {errors} failed reads")
                print(f"     consistency {reads} reads, {written[0] if isinstance(written, tuple) else written} writes, "
                      f"{mismatches} mismatches", flush=True)
            if "race" in plan.sections:
                doubles, zero = race(server.port, fx.reader_token, fx.brain_race, plan.race_rounds, plan.race_writers)
                results.add(name, "two_winners", doubles)
                if zero:
                    results.notes.append(f"{name} run {run + 1}: race: {zero} rounds without a winner")
                print(f"     race       {plan.race_rounds} rounds x {plan.race_writers}: {doubles} with two winners, "
                      f"{zero} with none", flush=True)
    finally:
        server.stop()
        if not plan.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)


@dataclass(frozen=True)
class GetTest:
    """One GET measured with :func:`load_get`: the metric it feeds, the request, the answer expected."""

    metric: str
    path: str
    headers: dict[str, str]
    expect: int = 200


def download_gets(list_path: str, small_path: str, big_path: str, small_checksum: str) -> list[GetTest]:
    """The four GETs a store's clients make: the brain list, the 304 freshness path, 100 KiB and 5 MiB."""
    return [
        GetTest("list", list_path, {}),
        GetTest("fresh304", small_path, {"If-None-Match": f'"{small_checksum}"'}, 304),
        GetTest("dl100k", small_path, {}),
        GetTest("dl5m_rps", big_path, {}),
    ]


def measure_gets(port: int, tests: list[GetTest], headers: dict[str, str], duration: float, use_wrk: bool,
                 label: str, notes: list[str]) -> dict[str, float]:
    """req/s of each test in turn (32 connections, ``duration`` s each); errors go to ``notes``."""
    measured = {}
    for test in tests:
        rps, errors = load_get(port, test.path, {**headers, **test.headers}, duration, use_wrk, test.expect)
        measured[test.metric] = rps
        if errors:
            notes.append(f"{label}: {test.metric}: {errors} errors / non-{test.expect} answers")
        print(f"     {test.metric:20s} {rps:10.0f} req/s" + (f"  ({errors} errors)" if errors else ""), flush=True)
    return measured


def store_gets(port: int, fx: Fixture, auth: dict[str, str], archives: dict[str, Any], plan: Plan, label: str,
               notes: list[str]) -> dict[str, float]:
    """The ``get`` section on our store: req/s per GET, plus the 5 MiB download in GiB/s."""
    tests = download_gets("/api/brains", f"/api/brains/{fx.brain_small}/sync", f"/api/brains/{fx.brain_big}/sync",
                          fx.small_checksum)
    measured = measure_gets(port, tests, auth, plan.duration, plan.use_wrk, label, notes)
    measured["dl5m"] = measured["dl5m_rps"] * len(archives["big"]) / GIB
    return measured


def measure_uploads(port: int, users: list[tuple[str, str]], archives: list[bytes], duration: float, label: str,
                    notes: list[str]) -> float:
    """Uploads/s (200 answers) of one client process per (token, brain id) running ``_upload_loop``."""
    start_at = time.time() + 1.0
    outcome = _clients(_upload_loop, [(port, token, brain, archives, start_at, duration) for token, brain in users])
    ok = sum(r[0] for r in outcome)
    failed = sum(r[1] for r in outcome)
    if failed:
        notes.append(f"{label}: uploads: {failed} failed")
    print(f"     {'uploads':20s} {ok / duration:10.1f} /s ({failed} failed)", flush=True)
    return ok / duration


def race(port: int, token: str, brain_id: str, rounds: int, writers: int) -> tuple[int, int]:
    """Rounds of ``writers`` concurrent If-Match uploads with the same base; count bad rounds."""
    setup = Client(port, token)
    status, _ = setup.upload(brain_id, make_archive(4 * KIB, 2, seed=10_000))
    doubles = zero = 0
    clients = [Client(port, token) for _ in range(writers)]
    for round_index in range(rounds):
        base = setup.json("GET", f"/api/brains/{brain_id}")["checksum"]
        bodies = [make_archive(2 * KIB, 2, seed=round_index * 1000 + i + 1) for i in range(writers)]
        barrier = threading.Barrier(writers)
        statuses: list[int] = []
        lock = threading.Lock()

        def go(client: Client, body: bytes) -> None:
            barrier.wait(timeout=60)
            got, _ = client.upload(brain_id, body, {"If-Match": f'"{base}"'})
            with lock:
                statuses.append(got)

        threads = [threading.Thread(target=go, args=(c, b)) for c, b in zip(clients, bodies)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        winners = statuses.count(200)
        doubles += winners > 1
        zero += winners == 0
    for client in [setup, *clients]:
        client.close()
    return doubles, zero


# ----------------------------------------------------------------------------- yardsticks


@contextlib.contextmanager
def yardstick_server(argv_for_port: Callable[[int], list[str]], log_path: Path) -> Iterator[int]:
    """Run ``argv_for_port(port)`` on a free loopback port until the block ends; yields the port."""
    port = free_port()
    process = start_process(argv_for_port(port), log_path)
    try:
        wait_healthy(process, port, log_path)
        yield port
    finally:
        stop_process(process)


def measure_litestar(port: int, plan: Plan, big_size: int, label: str, notes: list[str]) -> dict[str, float]:
    """The issue's Litestar yardsticks: the 304 handler (req/s), File 100 KiB (req/s) and File 5 MiB (GiB/s)."""
    tests = [GetTest("litestar_304", "/304", {}, 304), GetTest("litestar_file100k", "/file/small", {}),
             GetTest("litestar_file5m_rps", "/file/big", {})]
    measured = measure_gets(port, tests, {}, plan.duration, plan.use_wrk, label, notes)
    return {"litestar_304": measured["litestar_304"], "litestar_file100k": measured["litestar_file100k"],
            "litestar_file5m": measured["litestar_file5m_rps"] * big_size / GIB}


def measure_node(port: int, plan: Plan, archives: dict[str, Any], label: str, notes: list[str]) -> dict[str, float]:
    """The trivial Node server: the store's four GETs (same paths and headers shape) and 8-client uploads."""
    small_checksum = hashlib.sha256(archives["small"]).hexdigest()
    tests = download_gets("/api/brains", "/api/brains/small/sync", "/api/brains/big/sync", small_checksum)
    # A bearer header like the store's requests carry (the Node server ignores it): same request size.
    token = secrets.token_urlsafe(32)
    measured = measure_gets(port, tests, {"Authorization": f"Bearer {token}"}, plan.duration, plan.use_wrk, label,
                            notes)
    users = [(token, f"up{index}") for index in range(plan.clients)]  # one brain per client, as in `upload`
    return {
        "node_list": measured["list"],
        "node_304": measured["fresh304"],
        "node_100k": measured["dl100k"],
        "node_5m": measured["dl5m_rps"] * len(archives["big"]) / GIB,
        "node_upload": measure_uploads(port, users, archives["upload"], plan.duration, label, notes),
    }


def bench_yardsticks(plan: Plan, results: Results, workdir: Path, archives: dict[str, Any]) -> None:
    """Measure the yardsticks ``plan.runs`` times with the same load as the store (section ``yardstick``).

    The Litestar app runs on ``sys.executable``: the venv's Python, the one our store runs on
    (with ``--store-cmd`` the store's interpreter is unknown, so this is still the best guess).
    """
    small, big = workdir / "yardstick-100k.tar.gz", workdir / "yardstick-5m.tar.gz"
    small.write_bytes(archives["small"])
    big.write_bytes(archives["big"])
    uploads = workdir / "yardstick-uploads"  # beside the stores' data directories: the same file system
    uploads.mkdir(exist_ok=True)
    node = shutil.which("node")
    print(f"\n== yardsticks: trivial Litestar app ({sys.executable}), "
          + (f"trivial Node server ({node})" if node else "Node server skipped (node not on PATH)"), flush=True)
    if node is None:
        results.notes.append("yardstick: node not on PATH: the Node yardsticks were skipped")
    files = ["--small", str(small), "--big", str(big)]
    with contextlib.ExitStack() as stack:
        litestar_port = stack.enter_context(yardstick_server(
            lambda port: [sys.executable, str(YARDSTICK_DIR / "litestar_app.py"), "--port", str(port), *files],
            workdir / "yardstick-litestar.log"))
        node_port = None
        if node:
            node_port = stack.enter_context(yardstick_server(
                lambda port: [node, str(YARDSTICK_DIR / "node_server.js"), "--port", str(port), *files,
                              "--uploads", str(uploads)],
                workdir / "yardstick-node.log"))
        for run in range(plan.runs):
            label = f"yardstick run {run + 1}"
            print(f"   run {run + 1}/{plan.runs}: Litestar (port {litestar_port})", flush=True)
            measured = measure_litestar(litestar_port, plan, len(archives["big"]), label, results.notes)
            if node_port is not None:
                print(f"   run {run + 1}/{plan.runs}: Node (port {node_port})", flush=True)
                measured.update(measure_node(node_port, plan, archives, label, results.notes))
            for key, value in measured.items():
                results.add_yardstick(key, value)


# ----------------------------------------------------------------------------- report


def _fmt(value: float, unit: str) -> str:
    if unit == "GiB/s":
        return f"{value:.2f}"
    if unit in ("count",):
        return f"{value:.0f}"
    if unit == "MiB" or unit == "up/s":
        return f"{value:.1f}"
    return f"{value:,.0f}"


def report(results: Results, plan: Plan) -> str:
    lines = []
    width = 40
    header = f"{'metric':{width}s} {'config':7s} {'ours (median)':>14s} {'min-max':>20s} {'reference':>22s} {'target':>10s}  ok"
    lines.append(header)
    lines.append("-" * len(header))
    for metric, (label, unit, reference, targets, higher) in METRICS.items():
        for config in plan.configs:
            values = results.values.get(config, {}).get(metric)
            if not values:
                continue
            median = statistics.median(values)
            span = f"{_fmt(min(values), unit)}-{_fmt(max(values), unit)}" if len(values) > 1 else ""
            target = targets.get(config)
            if target is None:
                target_text, ok = "-", ""
            else:
                passed = median >= target if higher else median <= target
                target_text = (">=" if higher else "<=") + _fmt(target, unit)
                ok = "yes" if passed else "NO"
            if metric == "rss_peak":
                label = f"peak RSS, {plan.clients} x {plan.big_upload_mib} MiB uploads"
            lines.append(f"{label + ' (' + unit + ')':{width}s} {config:7s} {_fmt(median, unit):>14s} {span:>20s} "
                         f"{reference:>22s} {target_text:>10s}  {ok}")
    if results.notes:
        lines.append("")
        lines.append("notes:")
        lines.extend(f"  - {note}" for note in results.notes)
    return "\n".join(lines)


@dataclass(frozen=True)
class ScaledTarget:
    """One target judged against this machine: the target times the machine factor of its yardsticks."""

    metric: str
    config: str
    ours: float | None  # our median (None: not measured in this run)
    target: float
    higher_is_better: bool
    factors: dict[str, float | None]  # matching yardstick -> its factor (None: not measured)
    factor: float | None  # the factor applied (the largest); None when not scaled or no yardstick measured
    scaled: float | None  # the target to meet here; the target itself when not scaled

    @property
    def verdict(self) -> str:
        if self.ours is None:
            return "not measured"
        if self.scaled is None:
            return "no yardstick"
        met = self.ours >= self.scaled if self.higher_is_better else self.ours <= self.scaled
        return "met" if met else "NOT met"


def machine_factors(yardsticks: dict[str, list[float]]) -> dict[str, float]:
    """Machine factor per measured yardstick: median here / figure on the reference machine."""
    return {key: statistics.median(values) / YARDSTICKS[key].there
            for key, values in yardsticks.items() if key in YARDSTICKS and values}


def scale_target(metric: str, config: str, ours: float | None, factors: dict[str, float]) -> ScaledTarget:
    """Scale ``metric``'s target for ``config`` by the largest factor among its matching yardsticks.

    The largest factor gives the highest scaled target: judging by the yardstick that makes
    this machine look fastest is the conservative choice. Metrics without yardsticks
    (memory, correctness) keep their target unscaled.
    """
    _, _, _, targets, higher = METRICS[metric]
    target = targets[config]
    matching = {key: factors.get(key) for key in SCALED_BY.get(metric, ())}
    if metric not in SCALED_BY:
        return ScaledTarget(metric, config, ours, target, higher, {}, None, target)
    measured = [value for value in matching.values() if value is not None]
    factor = max(measured) if measured else None
    scaled = target * factor if factor is not None else None
    return ScaledTarget(metric, config, ours, target, higher, matching, factor, scaled)


def scaled_targets(results: Results, plan: Plan) -> list[ScaledTarget]:
    """Every target of the configurations in ``plan``, scaled by this run's machine factors."""
    factors = machine_factors(results.yardsticks)
    rows = []
    for metric, (_, _, _, targets, _) in METRICS.items():
        for config in plan.configs:
            if config not in targets:
                continue
            values = results.values.get(config, {}).get(metric)
            rows.append(scale_target(metric, config, statistics.median(values) if values else None, factors))
    return rows


def _factor_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _yardstick_lines(yardsticks: dict[str, list[float]]) -> list[str]:
    factors = machine_factors(yardsticks)
    header = f"{'yardstick':44s} {'here (median)':>14s} {'min-max':>20s} {'reference machine':>24s} {'factor':>7s}"
    lines = [header, "-" * len(header)]
    for key, stick in YARDSTICKS.items():
        values = yardsticks.get(key)
        if not values:
            lines.append(f"{stick.label + ' (' + stick.unit + ')':44s} {'skipped':>14s} {'':>20s} "
                         f"{stick.there_text:>24s} {'-':>7s}")
            continue
        span = f"{_fmt(min(values), stick.unit)}-{_fmt(max(values), stick.unit)}" if len(values) > 1 else ""
        lines.append(f"{stick.label + ' (' + stick.unit + ')':44s} {_fmt(statistics.median(values), stick.unit):>14s} "
                     f"{span:>20s} {stick.there_text:>24s} {_factor_text(factors.get(key)):>7s}")
    return lines


def _scaled_lines(rows: list[ScaledTarget]) -> list[str]:
    header = (f"{'target':40s} {'config':7s} {'ours (median)':>14s} {'target':>10s} {'factors':>34s} "
              f"{'scaled target':>14s}  verdict")
    lines = [header, "-" * len(header)]
    for row in rows:
        label, unit, _, _, _ = METRICS[row.metric]
        sign = ">=" if row.higher_is_better else "<="
        if row.metric in SCALED_BY:
            named = ", ".join(f"{key.split('_')[0].capitalize()} {_factor_text(value)}"
                              for key, value in row.factors.items())
            factors = f"{named} -> {_factor_text(row.factor)}"
        else:
            factors = "not scaled"
        ours = "-" if row.ours is None else _fmt(row.ours, unit)
        scaled = "-" if row.scaled is None else sign + _fmt(row.scaled, unit)
        target = sign + _fmt(row.target, unit)
        lines.append(f"{label + ' (' + unit + ')':40s} {row.config:7s} {ours:>14s} {target:>10s} "
                     f"{factors:>34s} {scaled:>14s}  {row.verdict}")
    return lines


SCALING_NOTE = """\
factor = median here / figure on the reference machine (issue #2; for a range its low end,
which gives the larger factor). A target with two yardsticks is scaled by the larger factor:
that gives the higher scaled target, so a "met" never rests on the more lenient comparison.
The Node server does strictly less per request than the reference store (no auth, no
lookups, no multipart parsing or archive checks), so its figure here is an upper bound of
the reference store's figure here, and its factor an upper bound of the machine factor:
targets scaled by it are, if anything, too strict. Memory and correctness targets do not
depend on the machine's speed and are not scaled."""


def yardstick_report(results: Results, plan: Plan) -> str:
    """The second table: yardsticks here and there with their factors, then every target scaled."""
    runs = max((len(values) for values in results.yardsticks.values()), default=0)
    lines = [f"Yardsticks on this machine (same load as the store; median of {runs} run(s), min-max over runs)", ""]
    lines += _yardstick_lines(results.yardsticks)
    lines += ["", "Targets scaled by the machine factor", ""]
    lines += _scaled_lines(scaled_targets(results, plan))
    lines += ["", SCALING_NOTE]
    return "\n".join(lines)


def json_report(results: Results, plan: Plan) -> dict[str, Any]:
    """Everything ``--json`` saves: every run's values, the notes, the yardsticks and the scaled targets."""
    data: dict[str, Any] = {"values": results.values, "notes": results.notes}
    if results.yardsticks:
        data["yardsticks"] = {
            key: {"values": values, "reference_machine": YARDSTICKS[key].there, "unit": YARDSTICKS[key].unit}
            for key, values in results.yardsticks.items() if key in YARDSTICKS
        }
        data["machine_factors"] = machine_factors(results.yardsticks)
        data["scaled_targets"] = [{**asdict(row), "verdict": row.verdict}
                                  for row in scaled_targets(results, plan)]
    return data


# ----------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> Plan:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=None, help="runs per configuration (default 3; 1 with --quick)")
    parser.add_argument("--duration", type=float, default=None, help="seconds per load test (default 10; 2 with --quick)")
    parser.add_argument("--configs", default=None, help="comma list of w1,w2,w1-enc,w2-enc (default all)")
    parser.add_argument("--sections", default=None, help=f"comma list of {','.join(SECTIONS)} (default all)")
    parser.add_argument("--big-upload-mib", type=int, default=None, help="archive size of the memory test (default 40)")
    parser.add_argument("--race-rounds", type=int, default=None, help="If-Match race rounds (default 20; 5 with --quick)")
    parser.add_argument("--upload-files", type=int, default=64, help="files in the 1 MiB upload archive (default 64)")
    parser.add_argument("--quick", action="store_true", help="a short smoke run (1 run, 2 s per test)")
    parser.add_argument("--no-wrk", action="store_true", help="use the Python load generator even if wrk exists")
    parser.add_argument("--store-cmd", default="", help="command that runs brain-store (default: the venv's)")
    parser.add_argument("--server-logs", action="store_true", help="keep the server's request logs on (STORE_QUIET unset)")
    parser.add_argument("--keep-data", action="store_true", help="keep the temporary data directories")
    parser.add_argument("--json", type=Path, default=None, help="also write raw results as JSON to this file")
    args = parser.parse_args(argv)
    plan = Plan()
    if args.quick:
        plan.runs, plan.duration, plan.race_rounds = 1, 2.0, 5
    plan.runs = args.runs or plan.runs
    plan.duration = args.duration or plan.duration
    plan.race_rounds = args.race_rounds or plan.race_rounds
    plan.big_upload_mib = args.big_upload_mib or plan.big_upload_mib
    plan.upload_files = args.upload_files
    if args.configs:
        plan.configs = tuple(c.strip() for c in args.configs.split(",") if c.strip())
        unknown = set(plan.configs) - set(CONFIGS)
        if unknown:
            parser.error(f"unknown configs: {', '.join(sorted(unknown))}")
    if args.sections:
        plan.sections = tuple(s.strip() for s in args.sections.split(",") if s.strip())
        unknown = set(plan.sections) - set(SECTIONS)
        if unknown:
            parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    plan.use_wrk = not args.no_wrk
    plan.store_cmd = args.store_cmd
    plan.quiet_server = not args.server_logs
    plan.keep_data = args.keep_data
    plan.json_path = args.json
    return plan


def main(argv: list[str] | None = None) -> int:
    plan = parse_args(argv)
    if plan.use_wrk and not wrk_available():
        print("wrk not found: install it (Debian/Ubuntu: `apt-get install -y wrk`, macOS: `brew install wrk`).\n"
              "Falling back to the built-in Python load generator: GET figures are then lower bounds.", flush=True)
        plan.use_wrk = False
    print(f"store bench: runs={plan.runs} duration={plan.duration}s configs={','.join(plan.configs)} "
          f"sections={','.join(plan.sections)} load={'wrk -t1 -c32' if plan.use_wrk else 'python (32 connections)'}")
    print(f"machine: {os.cpu_count()} cpus, {platform.platform()}, python {platform.python_version()}")
    results = Results()
    with tempfile.TemporaryDirectory(prefix="store-bench-") as tmp:
        workdir = Path(tmp)
        big_path = workdir / "big.tar.gz"
        print("building archives ...", flush=True)
        if "memory" in plan.sections:
            write_big_archive(big_path, plan.big_upload_mib * MIB, seed=7)
        archives = {
            "small": make_archive(100 * KIB, 16, seed=1),
            "big": make_archive(5 * MIB, 64, seed=2),
            # More distinct archives than a brain keeps (current + STORE_SNAPSHOTS=5), so every
            # upload is new content to the store and is validated in full, as a real push is.
            "upload": [make_archive(1 * MIB, plan.upload_files, seed=s) for s in range(100, 100 + UPLOAD_POOL)],
            "pair": [make_archive(256 * KIB, 16, seed=5), make_archive(300 * KIB, 20, seed=6)],
            "big_path": big_path,
        }
        print(f"  100 KiB archive: {len(archives['small'])} B, 5 MiB archive: {len(archives['big'])} B, "
              f"upload archive: {len(archives['upload'][0])} B ({plan.upload_files} files), "
              f"big upload: {big_path.stat().st_size if big_path.exists() else '-'} B", flush=True)
        if "yardstick" in plan.sections:
            try:
                bench_yardsticks(plan, results, workdir, archives)
            except Exception as exc:  # the store's own figures still count without the yardsticks
                results.notes.append(f"yardstick: failed: {type(exc).__name__}: {exc}"[:500])
                print(f"   FAILED: {exc}", flush=True)
        # Without a per-configuration section, starting each store would measure nothing.
        for config in plan.configs if set(plan.sections) & set(STORE_SECTIONS) else ():
            try:
                bench_config(config, plan, results, workdir, archives)
            except Exception as exc:  # one broken configuration must not hide the others
                results.notes.append(f"{config}: failed: {type(exc).__name__}: {exc}"[:500])
                print(f"   FAILED: {exc}", flush=True)
    if results.values or results.notes:
        print()
        print(report(results, plan))
    if results.yardsticks:
        print()
        print(yardstick_report(results, plan))
    print(f"\ncommand: {' '.join([sys.executable, *sys.argv])}")
    if plan.json_path:
        plan.json_path.write_text(json.dumps(json_report(results, plan), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
