"""Packing large brains in cached segments: same tar stream, deterministic, readable everywhere, small."""

from __future__ import annotations

import gzip
import json
import random
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from connector.engine.format import archive
from connector.engine.format.archive import load_archive, pack_archive
from connector.engine.format.brain import Brain, dump_json
from tests.engine.test_archive import _tarfile_written


def big_brain(memories: int = 3000, seed: int = 5) -> Brain:
    """A brain whose index files are large enough to be cut (ids, nested maps, many small files)."""
    rnd = random.Random(seed)
    ids = [f"mem_2025{rnd.randint(1, 12):02d}{rnd.randint(1, 28):02d}_{rnd.getrandbits(24):06x}" for _ in range(memories)]
    words = ["cache", "deploy", "postgres", "guitar", "lunch", "review", "budget", "kubernetes"]
    files: dict[str, bytes] = {}
    entries = {}
    for number, memory_id in enumerate(ids):
        path = f"area{number % 7}/topic{number % 13}/note-{number}.md"
        body = " ".join(rnd.choice(words) for _ in range(40))
        files[path] = f"---\nid: {memory_id}\n---\n{body}\n".encode()
        entries[memory_id] = {"title": body[:40], "path": path, "strength": round(rnd.random(), 4), "tags": rnd.sample(words, 2)}
    files["index.json"] = dump_json({"version": 2, "memory_count": len(ids), "memories": entries, "last_updated": "x"})
    edges = {a: {b: {"weight": 0.3, "origin": "tag_overlap"} for b in rnd.sample(ids, 3)} for a in ids}
    files["associations.json"] = dump_json({"version": 1, "edges": edges})
    return Brain(files)


def with_new_memory(brain: Brain, tag: str) -> Brain:
    """A copy changed the way a memorize changes it: a new file, an entry appended, an edge added."""
    changed = brain.copy()
    index = json.loads(changed.files["index.json"])
    index["memories"][f"mem_20260101_{tag}"] = {"title": "new", "path": f"captured/{tag}.md", "strength": 1, "tags": []}
    index["memory_count"] += 1
    changed.files["index.json"] = dump_json(index)
    edges = json.loads(changed.files["associations.json"])
    first = next(iter(edges["edges"]))
    edges["edges"][first][f"mem_20260101_{tag}"] = {"weight": 0.3, "origin": "manual"}
    changed.files["associations.json"] = dump_json(edges)
    changed.files[f"captured/{tag}.md"] = b"---\nid: x\n---\nnew\n"
    return changed


@pytest.fixture
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with an empty segment cache (packing must not depend on it)."""
    monkeypatch.setattr(archive, "_DEFLATED", archive._Deflated())


def test_big_brain_packs_to_the_tarfile_stream_in_several_segments(fresh_cache: None) -> None:
    brain = big_brain()
    assert len(brain.files["index.json"]) > archive._BIG_FILE
    packed = pack_archive(brain)
    assert gzip.decompress(packed) == _tarfile_written(brain)
    assert zlib.decompress(packed, wbits=31) == gzip.decompress(packed)  # one gzip member
    assert load_archive(packed).files == brain.files
    paths = sorted(brain.files)
    entries = sorted([(tuple(p.split("/")), False) for p in paths] + [(tuple(d.split("/")), True) for d in archive._directories(paths)])
    segments = list(archive._segments(brain.files, entries))
    assert len(segments) > 20 and b"".join(segments) == _tarfile_written(brain)
    # Cutting costs little: within 5% of compressing the whole stream at once with the
    # same compressor and level (1.7% at 10,000 memories).
    whole = archive.zlib_ng.compressobj(archive._GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert len(packed) <= len(whole.compress(_tarfile_written(brain)) + whole.flush()) * 1.05


def test_cached_packs_equal_cold_packs(monkeypatch: pytest.MonkeyPatch, fresh_cache: None) -> None:
    brain = big_brain()
    first = pack_archive(brain)
    assert pack_archive(brain.copy()) == first  # warm: every segment from the cache
    changed = with_new_memory(brain, "abc123")
    warm = pack_archive(changed)
    monkeypatch.setattr(archive, "_DEFLATED", archive._Deflated())
    cold = pack_archive(changed)
    assert warm == cold and warm != first
    assert gzip.decompress(warm) == _tarfile_written(changed)
    # A tiny cache (everything evicted at once) changes nothing either.
    monkeypatch.setattr(archive, "_DEFLATED", archive._Deflated(max_bytes=1))
    assert pack_archive(changed) == cold and pack_archive(changed) == cold


def test_a_change_recompresses_few_segments(fresh_cache: None) -> None:
    brain = big_brain()
    pack_archive(brain)
    compressed: list[int] = []
    real = archive.zlib_ng.compressobj

    def counting(*args: object, **kwargs: object) -> object:
        compressed.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(archive.zlib_ng, "compressobj", counting)
        pack_archive(with_new_memory(brain, "def456"))
    paths = sorted(brain.files)
    entries = sorted([(tuple(p.split("/")), False) for p in paths] + [(tuple(d.split("/")), True) for d in archive._directories(paths)])
    total = len(list(archive._segments(brain.files, entries)))
    # The segment holding each change and the one after it (its dictionary changed).
    assert 0 < len(compressed) <= 12 < total


@pytest.mark.skipif(shutil.which("tar") is None, reason="no system tar")
def test_gnu_tar_and_gzip_read_a_segmented_pack(tmp_path: Path, fresh_cache: None) -> None:
    brain = big_brain(memories=1500)
    target = tmp_path / "brain.tar.gz"
    target.write_bytes(pack_archive(brain))
    assert subprocess.run(["gzip", "-t", str(target)], timeout=60).returncode == 0
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(target), "-C", str(out)], check=True, timeout=60)
    assert (out / "index.json").read_bytes() == brain.files["index.json"]
    assert len([p for p in out.rglob("*") if p.is_file()]) == len(brain.files)
