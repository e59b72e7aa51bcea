"""The contract conformance suite passes with OIDC ID tokens as the credentials (`brain-store check`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.contract.harness import running_store
from tests.oidc.test_store_http import DOMAIN, oidc_env
from tests.support.oidc_issuer import IssuerClient
from tests.support.processes import REPO_ROOT, console_script

pytestmark = pytest.mark.timeout(300)


def test_conformance_suite_with_oidc_tokens(issuer: IssuerClient, tmp_path: Path) -> None:
    with running_store(tmp_path / "data", env=oidc_env(issuer)) as running:
        token1 = issuer.mint("RS256", sub="conformance-1", email=f"c1@{DOMAIN}", email_verified=True, ttl=1800)
        token2 = issuer.mint("ES256", sub="conformance-2", email=f"c2@{DOMAIN}", email_verified=True, ttl=1800)
        done = subprocess.run(
            [console_script("brain-store"), "check", "--url", running.url, "--token", token1, "--token2", token2],
            capture_output=True, text=True, cwd=REPO_ROOT, timeout=280,
        )
        problems = [line for line in done.stdout.splitlines() if line.strip() and not line.startswith("PASS")]
        assert done.returncode == 0, "\n".join(problems) + done.stderr
        assert " 0 failed" in done.stdout or "0 failed" in done.stdout
