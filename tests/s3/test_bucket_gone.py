"""A bucket that vanishes under a running store: every request that needs it answers 503 with
a stable code and ``Retry-After`` (not 500, not a 404 that says the brain is gone), nothing is
written meanwhile, and once the bucket is back the store serves as before."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.contract.harness import running_store
from tests.s3.archives import archive
from tests.s3.servers import S3Service, wait_for_token


def _remove_bucket(moto: S3Service, bucket: str) -> dict[str, bytes]:
    """Delete every object and then the bucket; what the objects held, by key."""
    client = moto.client()
    saved = {key: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in moto.keys(bucket)}
    for key in saved:
        client.delete_object(Bucket=bucket, Key=key)
    client.delete_bucket(Bucket=bucket)
    return saved


def _put_back(moto: S3Service, bucket: str, saved: dict[str, bytes]) -> None:
    client = moto.client()
    client.create_bucket(Bucket=bucket)
    for key, body in saved.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)


def test_a_vanished_bucket_is_503_until_it_is_back(moto: S3Service, tmp_path: Path) -> None:
    bucket = moto.new_bucket()
    with running_store(tmp_path / "spool", env=moto.store_env(bucket)) as store:
        token = store.add_user("alice")
        wait_for_token(store.url, token)
        http = httpx.Client(base_url=store.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        brain = http.get("/api/brains").json()[0]["id"]
        first, second = archive({"memories/a.md": b"first"}), archive({"memories/a.md": b"second"})
        for body in (first, second):
            assert http.put(f"/api/brains/{brain}/sync", files={"brain": ("b.tgz", body)}).status_code == 200
        saved = _remove_bucket(moto, bucket)

        upload = {"files": {"brain": ("b.tgz", archive({"memories/a.md": b"third"}))}}
        requests = [("GET", "/api/brains", {}), ("POST", "/api/brains", {"json": {"name": "more"}}),
                    ("GET", f"/api/brains/{brain}", {}), ("GET", f"/api/brains/{brain}/sync", {}),
                    ("HEAD", f"/api/brains/{brain}/sync", {}), ("GET", f"/api/brains/{brain}/versions", {}),
                    ("PUT", f"/api/brains/{brain}/sync", upload), ("DELETE", f"/api/brains/{brain}", {}),
                    ("DELETE", "/api/keys/bsk_nosuchkey", {})]  # the sharing document, in the bucket too
        for method, path, extra in requests:
            answer = http.request(method, path, **extra)
            assert answer.status_code == 503, (method, path, answer.status_code, answer.text)
            assert int(answer.headers["retry-after"]) > 0, (method, path)
            if method != "HEAD":
                assert answer.json()["code"] == "storage_unavailable", (method, path, answer.text)
                assert "bucket" in answer.json()["error"], answer.text
        ready = http.get("/health/ready")
        assert ready.status_code == 503 and ready.json()["error"] == "object store bucket is not reachable"

        _put_back(moto, bucket, saved)
        assert sorted(moto.keys(bucket)) == sorted(saved)  # nothing was written while it was gone
        assert http.get("/health/ready").status_code == 200
        assert http.get(f"/api/brains/{brain}/sync").content == second
        assert [b["id"] for b in http.get("/api/brains").json()] == [brain]
        assert http.put(f"/api/brains/{brain}/sync", **upload).status_code == 200
        assert len(http.get(f"/api/brains/{brain}/versions").json()["versions"]) == 2


def test_an_endpoint_that_stops_answering_is_503_not_500(tmp_path: Path) -> None:
    """The S3 service itself gone (its process stopped): connection refused after botocore's
    retries is the same 503 as a missing bucket, said in one log line, not a 500."""
    from tests.s3.servers import moto_server

    with moto_server(tmp_path) as moto:
        bucket = moto.new_bucket()
        store_env = moto.store_env(bucket)
        with running_store(tmp_path / "spool", env=store_env) as store:
            token = store.add_user("alice")
            wait_for_token(store.url, token)
            http = httpx.Client(base_url=store.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
            brain = http.get("/api/brains").json()[0]["id"]
            assert http.put(f"/api/brains/{brain}/sync",
                            files={"brain": ("b.tgz", archive({"memories/a.md": b"first"}))}).status_code == 200
            assert moto.stop is not None
            moto.stop()
            upload = {"files": {"brain": ("b.tgz", archive({"memories/a.md": b"second"}))}}
            for method, path, extra in (("GET", f"/api/brains/{brain}/sync", {}),
                                        ("GET", f"/api/brains/{brain}/versions", {}),
                                        ("PUT", f"/api/brains/{brain}/sync", upload),
                                        ("DELETE", "/api/keys/bsk_nosuchkey", {})):  # the sharing document
                answer = http.request(method, path, **extra)
                assert answer.status_code == 503, (method, path, answer.status_code, answer.text)
                assert answer.json()["code"] == "storage_unavailable" and int(answer.headers["retry-after"]) > 0
            assert http.get("/health/ready").status_code == 503
        log = (tmp_path / "store.log").read_text()
        assert "storage unavailable on GET" in log and "Traceback" not in log
