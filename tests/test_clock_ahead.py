"""The suite does not depend on today's date: its date-dependent tests pass a year from now.

A test whose result depends on the wall clock (an expiry, a "recent" window, a retention
period, a date inside a fixture) carries the ``clock`` mark. This test runs every such test
again in a child pytest under libfaketime (Debian ``faketime``) with the clock a year ahead,
for the test process and every server it starts. A fixture that ages out, or a test that
reads a date it did not set, fails here the day it is written, not a year later on CI.

libfaketime moves what processes read from the clock, not the times the kernel stamps on
files, so tests that compare file times with the clock are not marked: they would fail for
the tool's sake, not the code's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.tools import needs_tool

ROOT = Path(__file__).resolve().parent.parent
AHEAD_DAYS = 365
FAKETIME = shutil.which("faketime")

pytestmark = needs_tool(FAKETIME is not None, "faketime is not installed (Debian package faketime)")


def _ahead(*argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
    assert FAKETIME is not None
    env = {**os.environ, "FAKETIME_DONT_RESET": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([FAKETIME, "-f", f"+{AHEAD_DAYS}d", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def test_the_child_clock_is_a_year_ahead() -> None:
    probe = _ahead(sys.executable, "-c", "import time; print(time.time())", timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert float(probe.stdout) - time.time() > (AHEAD_DAYS - 1) * 86400


def marked_modules() -> list[str]:
    """The test modules that use the mark (collecting only these keeps the child run short)."""
    return sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py")
                  if path.name != Path(__file__).name and "pytest.mark.clock" in path.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_date_dependent_tests_pass_a_year_ahead(tmp_path: Path) -> None:
    modules = marked_modules()
    assert modules
    run = _ahead(sys.executable, "-m", "pytest", "-q", "-n", "0", "-m", "clock", "-p", "no:cacheprovider",
                 "--basetemp", str(tmp_path / "basetemp"), *modules, timeout=900)
    tail = (run.stdout + run.stderr)[-6000:]
    assert run.returncode == 0, tail
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed and int(passed.group(1)) >= 10, tail  # the mark still selects the date-dependent tests
