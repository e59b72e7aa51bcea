"""Start server processes for tests by forking a process that has already imported the program.

Importing the connector (the MCP SDK, Litestar, the engine) costs a new process ~1.2 s of CPU
before it serves anything, the store ~0.3 s; the suite starts hundreds of them. A helper process
per program and test process imports the program's modules once and forks a process on request,
the way `serve --workers N` forks its workers from a leader that imported everything
(cli/serving/workers.py). Each fork is a real process: it gets the environment, working
directory, arguments and standard streams the test asked for (a server its own session), then
runs the same click command as the console script and exits as it would (atexit, stdio flushed).

The helper is the fork's parent: it reaps it and reports its exit status, which ForkedProcess
turns into the few `subprocess.Popen` calls the tests make (pid, poll, wait, returncode,
send_signal). Only the commands listed in _PROGRAMS are forked, and only when the environment
differs from the helper's in the programs' own settings; anything else (interpreter or loader
settings, another program) is started the ordinary way, as is everything with BRAIN_TESTS_NO_FORK=1.

The helper runs this file as a script (``python forkserver.py brain-connector``): it imports nothing
from the tests.
"""

from __future__ import annotations

import atexit
import importlib
import json
import locale
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from common.workers import pid_alive  # a zombie not yet reaped counts as ended

# Environment variables a fork may differ in from its helper: read by the programs' settings at
# run time. Anything else (PYTHON*, LD_PRELOAD, thread counts read when a library loads) could
# mean something only to a fresh interpreter, so such a start is not forked.
# OpenMP's settings (GNU's OMP_*, Intel's KMP_*) count too: its runtimes load with the e5 engine
# or the sentence model on first use, never in a helper, and a test process that loaded them
# itself has some set (connector/engine/recall/e5.py; threadpoolctl sets KMP_DUPLICATE_LIB_OK).
_RUN_TIME_PREFIXES = ("CONNECTOR_", "STORE_", "AWS_", "BRAIN_", "OMP_", "KMP_")
_RUN_TIME_NAMES = frozenset({"PYTEST_CURRENT_TEST", "TMPDIR", "HOME", "SSL_CERT_FILE", "SSL_CERT_DIR",
                             "REQUESTS_CA_BUNDLE", "NO_PROXY", "no_proxy"})


@dataclass(frozen=True)
class _Program:
    """A console script the helper may fork: its click group, the commands forked, what to import first."""

    main: str
    commands: tuple[str, ...]
    preload: tuple[str, ...]


# The commands the suite runs most. One helper per program: a fork holds only its own program's modules.
_PROGRAMS = {
    "brain-connector": _Program("cli.connector", ("serve", "import"), (
        "cli.connector.serve", "connector.app", "uvicorn", "cli.serving.workers", "common.connection_guard",
        "cli.connector.importing")),
    "brain-store": _Program("cli.store", ("serve", "user", "brain", "key", "share", "unshare", "audit"), (
        "cli.store.serve", "cli.store.runner", "uvicorn", "store.app", "store.storage.factory", "store.upload",
        "cli.store.users", "cli.store.brains", "cli.store.sharing")),
}


def fork_server_for(argv: Sequence[str], env: Mapping[str, str]) -> ForkServer | None:
    """The helper that runs ``argv`` with environment ``env`` in a fork exactly as a new process
    would run it; None when it must be started the ordinary way."""
    if os.environ.get("BRAIN_TESTS_NO_FORK"):  # every process started the ordinary way (to compare)
        return None
    program = Path(argv[0]).name if argv else ""
    if program not in _PROGRAMS or len(argv) < 2 or argv[1] not in _PROGRAMS[program].commands:
        return None
    if Path(argv[0]).parent != Path(sys.executable).parent:
        return None
    helper = _HELPERS.setdefault(program, ForkServer(program))
    base = helper.base_env()
    changed = {name for name in set(env) | set(base) if env.get(name) != base.get(name)}
    if all(name.startswith(_RUN_TIME_PREFIXES) or name in _RUN_TIME_NAMES for name in changed):
        return helper
    return None


class ForkServer:
    """This test process's helper for one program, started on first use."""

    def __init__(self, program: str) -> None:
        self.program = program
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] = {}
        self._pending = b""
        self._exits: dict[int, int] = {}

    @property
    def pid(self) -> int | None:
        """The helper's process id while it runs."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def base_env(self) -> dict[str, str]:
        """The environment the helper runs with (os.environ when it started)."""
        return self._env if self._process is not None else dict(os.environ)

    def start(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, log_path: Path) -> ForkedProcess:
        """Fork a server running ``argv`` in its own session, its output appended to ``log_path``."""
        return self._fork({"argv": list(argv), "env": dict(env), "cwd": str(cwd), "stdin": os.devnull,
                           "stdout": str(log_path), "stderr": str(log_path), "session": True})

    def run(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        """``subprocess.run(argv, env=env, cwd=cwd, input=input, capture_output=True, text=True,
        timeout=timeout)`` done by a fork (a command that ends by itself)."""
        with tempfile.TemporaryDirectory(prefix="forked-run-") as scratch:
            stdin, stdout, stderr = (Path(scratch) / name for name in ("stdin", "stdout", "stderr"))
            stdin.write_text(input or "")
            process = self._fork({"argv": list(argv), "env": dict(env), "cwd": str(cwd), "stdin": str(stdin),
                                  "stdout": str(stdout), "stderr": str(stderr), "session": False})
            try:
                code = process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise
            return subprocess.CompletedProcess(list(argv), code, _text(stdout), _text(stderr))

    def _fork(self, request: dict) -> ForkedProcess:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._env = dict(os.environ)
                self._process = subprocess.Popen([sys.executable, __file__, self.program], stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE, env=self._env, cwd=request["cwd"])
                atexit.register(self.close)
            assert self._process.stdin is not None
            self._process.stdin.write(json.dumps(request).encode() + b"\n")
            self._process.stdin.flush()
            while True:
                message = self._read(timeout=60)
                if message is None:
                    raise RuntimeError("the fork server did not answer")
                if "pid" in message:
                    return ForkedProcess(self, int(message["pid"]), request["argv"])

    def close(self) -> None:
        """End the helper (forks still running go on, as servers started the ordinary way would)."""
        if self._process is not None and self._process.stdin is not None:
            self._process.stdin.close()
            self._process.wait(timeout=30)

    def exit_code(self, pid: int, timeout: float) -> int | None:
        """The exit code of fork ``pid`` once the helper has reaped it (None: still running)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:  # held for short reads only: other threads start and stop servers too
                if pid not in self._exits:
                    self._read(timeout=max(0.0, min(0.05, deadline - time.monotonic())))
                if pid in self._exits:
                    return self._exits[pid]
            if time.monotonic() >= deadline:
                return None

    def _read(self, timeout: float) -> dict | None:
        """The next message of the helper (exit reports are recorded and returned too); None on timeout."""
        assert self._process is not None and self._process.stdout is not None
        stream = self._process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            if not select.select([stream], [], [], max(0.0, deadline - time.monotonic()))[0]:
                return None  # (a timeout of 0 still takes what has arrived)
            chunk = os.read(stream, 65536)
            if not chunk:
                raise RuntimeError("the fork server exited")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        message = json.loads(line)
        if "exit" in message:
            self._exits[int(message["exit"])] = int(message["code"])
        return message


def _text(path: Path) -> str:
    """A captured stream as `subprocess.run(..., text=True)` returns it."""
    return path.read_bytes().decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


class ForkedProcess:
    """A forked server, with the part of `subprocess.Popen` the tests use."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]) -> None:
        self._server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            # As Popen's: a process that has ended has a code, though the helper reaps it within 50 ms.
            self.returncode = self._server.exit_code(self.pid, timeout=0 if pid_alive(self.pid) else 5)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid, timeout=1e9 if timeout is None else timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_HELPERS: dict[str, ForkServer] = {}


# ---- the helper process ----

def _serve_requests(program: _Program) -> None:
    """Read requests from stdin, fork each, report pids and exit codes on stdout; end at EOF."""
    sys.path[0] = str(Path(sys.executable).parent)  # the console script's, not this file's folder
    for name in (program.main, *program.preload):
        importlib.import_module(name)
    requests, reports = sys.stdin.buffer.fileno(), sys.stdout.buffer
    pending, children = b"", set()
    while True:
        ready = select.select([requests], [], [], 0.05 if children else None)[0]
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                _report(reports, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})
        if not ready:
            continue
        chunk = os.read(requests, 65536)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, _, pending = pending.partition(b"\n")
            pid = os.fork()
            if pid == 0:
                _become_server(program, json.loads(line))  # does not return
            children.add(pid)
            _report(reports, {"pid": pid})


def _report(stream: object, message: dict) -> None:
    stream.write(json.dumps(message).encode() + b"\n")  # type: ignore[attr-defined]
    stream.flush()  # type: ignore[attr-defined]


def _become_server(program: _Program, request: dict) -> NoReturn:
    """In the fork: the process the console script would have been, running the command to its end."""
    try:
        if request["session"]:
            os.setsid()
        for fd, name, flags in ((0, "stdin", os.O_RDONLY), (1, "stdout", os.O_WRONLY | os.O_APPEND | os.O_CREAT),
                                (2, "stderr", os.O_WRONLY | os.O_APPEND | os.O_CREAT)):
            opened = os.open(request[name], flags, 0o666)  # as open() makes it, less the umask
            os.dup2(opened, fd)
            os.close(opened)
        os.closerange(3, 65536)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        time.tzset()
        tempfile.tempdir = None  # read TMPDIR again
        argv = request["argv"]
        sys.argv = list(argv)
        sys.path[0] = str(Path(argv[0]).parent)  # as for the console script
    except BaseException:  # noqa: BLE001 - nothing may return into the helper's loop
        os._exit(70)
    main = importlib.import_module(program.main).main

    # As the console script does; what is raised leaves through the helper's frames, which catch
    # nothing, so the interpreter ends this process as it ends a new one (threads, atexit, stdio).
    sys.exit(main(args=argv[1:], prog_name=Path(argv[0]).name))


if __name__ == "__main__":
    _serve_requests(_PROGRAMS[sys.argv[1]])
