"""`brain-store serve` makes all threads share one glibc malloc arena, so memory freed by
upload threads is not kept per thread (see ``share_one_malloc_arena``)."""

from __future__ import annotations

import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc malloc arenas"
)

# A child that (optionally) limits the arenas, lets eight threads allocate and free MiB
# buffers at once, then writes glibc's malloc_info XML (one <heap> per arena) to a file.
CHILD = """
import ctypes, sys, threading
from cli.store.runner import share_one_malloc_arena
if sys.argv[2] == "shared":
    share_one_malloc_arena()
start = threading.Barrier(8)
def work():
    start.wait()
    for _ in range(20):
        buffers = [bytearray(1 << 20) for _ in range(4)]
        del buffers
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
out = libc.fopen(sys.argv[1].encode(), b"w")
libc.malloc_info(0, out)
libc.fclose(out)
"""


def _arenas(tmp_path: Path, mode: str) -> int:
    report = tmp_path / f"{mode}.xml"
    subprocess.run([sys.executable, "-c", CHILD, str(report), mode], check=True, timeout=60,
                   cwd=Path(__file__).resolve().parents[3])
    return len(re.findall(r'<heap nr="\d+">', report.read_text()))


def test_threads_share_one_arena(tmp_path: Path) -> None:
    assert _arenas(tmp_path, "default") > 1  # the check can see several arenas
    assert _arenas(tmp_path, "shared") == 1
