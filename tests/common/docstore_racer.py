"""One racer process of tests/common/test_docstore.py: opens the store, says ``ready`` and waits
for ``go`` on stdin (sent to every racer at once), does one operation on one key (``repeat``
times) and prints what it got (one line of JSON)."""

from __future__ import annotations

import json
import sys

from common.docstore import open_document_store


def _increment(data: bytes | None) -> bytes:
    return str(int(data or b"0") + 1).encode()


def main(location: str, endpoint: str, op: str, key: str, repeat: int, version: str = "") -> None:
    store = open_document_store(location, s3_endpoint_url=endpoint or None, fsync=False)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go")
    results: list[object] = []
    for i in range(repeat):
        if op == "create":
            results.append(store.create(key, f"{i}".encode()) is not None)
        elif op == "take":
            doc = store.take(key)
            results.append(None if doc is None else doc.data.decode())
        elif op == "replace":
            results.append(store.replace(key, b"replaced", version) is not None)
        elif op == "update":
            results.append(int(store.update(key, _increment, attempts=200) or b"0"))
        else:
            raise SystemExit(f"unknown operation {op}")
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), *sys.argv[6:])
