"""Which certificate authorities the test processes' HTTP clients trust: the system's directory.

Every ``httpx.get`` (and every new ``httpx.Client``) builds an SSL context; from a bundle file
(``SSL_CERT_FILE``, else certifi's) that loads ~150 certificates each time, ~25 ms of CPU,
tests' HTTP calls to loopback servers included: a quarter to a half of some modules' CPU. From
the OpenSSL directory (``SSL_CERT_DIR``) a certificate is read only when a peer presents one,
so a new context costs ~0.1 ms. The authorities are the same (Debian's bundle and directory
come from one package); only where they are read from changes, and tests talk only to loopback.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

# The bundle the host named before the test run changed it (the image test copies it into the image).
HOST_CA_BUNDLE = os.environ.get("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")

_SAVED = ("SSL_CERT_FILE", "SSL_CERT_DIR")


def trust_the_ca_directory() -> dict[str, str | None]:
    """Point this process (and what it starts) at the system's CA directory; what it replaced.

    Nothing changes where OpenSSL has no such directory.
    """
    saved = {name: os.environ.get(name) for name in _SAVED}
    directory = ssl.get_default_verify_paths().capath
    if directory and Path(directory).is_dir() and any(Path(directory).glob("*.0")):  # hashed names
        os.environ.pop("SSL_CERT_FILE", None)
        os.environ["SSL_CERT_DIR"] = directory
    return saved


def restore_trust(saved: dict[str, str | None]) -> None:
    """Put back what :func:`trust_the_ca_directory` replaced."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
