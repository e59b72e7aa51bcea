"""Run `brain-store` commands against a bucket, and open its backend in-process."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support.processes import REPO_ROOT, console_script


def run_cli(env: dict[str, str], *args: str, check: bool = True) -> str:
    """Run ``brain-store ARGS`` with ``env`` (plus PATH etc.); stdout, or raise on failure."""
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("STORE_")}, **env}
    done = subprocess.run([console_script("brain-store"), *args], capture_output=True, text=True, env=full,
                          cwd=REPO_ROOT, timeout=120)
    if check and done.returncode != 0:
        raise AssertionError(f"brain-store {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def backend_for(service: Any, env: dict[str, str], scratch: Path) -> Any:
    """The S3 backend a store with ``env`` uses (with the test's credentials)."""
    from store.storage.s3 import S3Backend
    from store.storage.s3client import Bucket

    return S3Backend(service.client(), Bucket.of(env["STORE_S3_BUCKET"], env["STORE_S3_PREFIX"]), scratch)
