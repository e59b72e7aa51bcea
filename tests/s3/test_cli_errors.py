"""`brain-store` commands on a bucket S3 will not serve: one clear line, never a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.s3.servers import S3Service
from tests.support.processes import REPO_ROOT, console_script

# xdist groups (one per S3 service) are set in conftest.py


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, **env}
    return subprocess.run([console_script("brain-store"), *args], capture_output=True, text=True, env=full,
                          cwd=REPO_ROOT, timeout=120)


@pytest.mark.parametrize("args", [
    ("user", "list"),
    ("user", "add", "alice"),
    ("brain", "list"),
    ("rekey", "--new-key", "44" * 32),
])
def test_a_missing_bucket_is_one_line(moto: S3Service, tmp_path: Path, args: tuple[str, ...]) -> None:
    env = {**moto.store_env("no-such-bucket-here"), "STORE_DATA_DIR": str(tmp_path / "scratch")}
    done = _run(env, *args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "NoSuchBucket" in done.stderr or "does not exist" in done.stderr, done.stderr


def test_missing_credentials_are_one_line(moto: S3Service, tmp_path: Path) -> None:
    env = {**moto.store_env(moto.new_bucket()), "STORE_DATA_DIR": str(tmp_path / "scratch"),
           "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    done = _run(env, "user", "list")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "credentials" in done.stderr, done.stderr
