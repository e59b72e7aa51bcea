"""Start our store as a real process on loopback and create users with the real CLI.

Shared by the contract tests and the end-to-end store tests (tests/store/e2e/).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import REPO_ROOT, ServerProcess, console_script, free_port, run_server

# Generous limits so suites are not slowed by 429s; the failed-login limit keeps its default.
FAST_ENV = {
    "STORE_QUIET": "1",
    "STORE_RATE_REQUESTS_PER_MIN": "1000000",
    "STORE_RATE_UPLOADS_PER_MIN": "1000000",
}
NO_LIMITS_ENV = {"STORE_QUIET": "1", "STORE_RATE_LIMITS": "off"}


@dataclass
class Store:
    """A running store: its process, URL and data directory."""

    server: ServerProcess
    data_dir: Path
    env: dict[str, str]

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:40123."""
        return self.server.base_url

    def add_user(self, name: str, email: str | None = None) -> str:
        """Create a user through the CLI and return its token."""
        return add_user(self.data_dir, name, email=email, env=self.env)


def _clean_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    # Never inherit a developer's STORE_* settings into a test server.
    base = {k: v for k, v in os.environ.items() if not k.startswith("STORE_")}
    return {**base, **(extra or {})}


def serve_argv(data_dir: Path, port: int, workers: int | None = None) -> list[str]:
    """The command line that serves ``data_dir`` on 127.0.0.1:``port``."""
    argv = [console_script("brain-store"), "serve", "--host", "127.0.0.1", "--port", str(port), "--data", str(data_dir)]
    if workers:
        argv += ["--workers", str(workers)]
    return argv


@contextmanager
def running_store(
    data_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    workers: int | None = None,
    log_name: str = "store.log",
    port: int | None = None,
) -> Iterator[Store]:
    """Run ``brain-store serve`` on ``data_dir`` until the block ends."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    full_env = _clean_env({**FAST_ENV, **(env or {})})
    port = port or free_port()
    log_path = data_dir.parent / log_name
    with run_server(serve_argv(data_dir, port, workers), port=port, log_path=log_path, env=full_env, timeout=60) as server:
        yield Store(server, data_dir, full_env)


def add_user(data_dir: Path, name: str, *, email: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """``brain-store user add NAME --data DIR``; the token is the last printed line."""
    argv = [console_script("brain-store"), "user", "add", name, "--data", str(data_dir)]
    if email is not None:
        argv += ["--email", email]
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(env or _clean_env(None)), cwd=REPO_ROOT, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"user add failed ({done.returncode}): {done.stdout}\n{done.stderr}")
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError(f"user add printed nothing: {done.stderr}")
    return lines[-1]
