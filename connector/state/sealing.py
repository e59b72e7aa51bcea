"""Sealing the connector's secrets at rest: the state key, AES-256-GCM boxes, token hashes.

Every replica must open what any other sealed, so they share one 32-byte state key:
``CONNECTOR_STATE_KEY``, or (with a state directory only) a ``state.key`` file generated
there once. A state kept in a bucket needs the configured key: the key never lives
beside what it seals.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from connector.state.files import StateError, ensure_private_dir

KEY_FILE_NAME = "state.key"
_SECRET_PREFIX = "sec1:"
_SECRET_INFO = b"brain-connector state secrets v1"


def token_hash(token: str) -> str:
    """The SHA-256 hex of a token: the only form in which our tokens are stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def load_state_key(state_dir: Path | None, configured: bytes | None) -> tuple[bytes, str]:
    """The 32-byte state key and where it came from.

    A configured key (``CONNECTOR_STATE_KEY``) wins. Otherwise a key file in the
    state directory is read, or generated with mode 0600. With neither, a random
    key lives only as long as the process.
    """
    if configured is not None:
        if len(configured) != 32:
            raise StateError("the state key must be 32 bytes")
        return configured, "configured"
    if state_dir is None:
        return secrets.token_bytes(32), "ephemeral"
    ensure_private_dir(state_dir)
    path = state_dir / KEY_FILE_NAME
    if path.exists():
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise StateError(f"{path} is readable by others (mode {mode:o}); chmod 600 it")
        try:
            key = bytes.fromhex(path.read_text(encoding="ascii").strip())
        except ValueError:
            raise StateError(f"{path} does not hold 64 hex characters") from None
        if len(key) != 32:
            raise StateError(f"{path} does not hold a 32-byte key")
        return key, "file"
    key = secrets.token_bytes(32)
    # O_EXCL: two processes starting at once must not each write a different key.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return load_state_key(state_dir, None)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(key.hex() + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return key, "generated"


class SecretBox:
    """AES-256-GCM for small secrets at rest, bound to what they belong to."""

    def __init__(self, state_key: bytes) -> None:
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_SECRET_INFO).derive(state_key)
        self._aead = AESGCM(key)

    def seal(self, plaintext: str, context: str) -> str:
        """``plaintext`` sealed; ``context`` (e.g. the family id) must match when opening."""
        return _SECRET_PREFIX + base64.urlsafe_b64encode(self.seal_bytes(plaintext.encode("utf-8"), context)).decode("ascii")

    def open(self, sealed: str, context: str) -> str | None:
        """The secret, or None when it was sealed under another key or context, or altered."""
        if not sealed.startswith(_SECRET_PREFIX):
            return None
        try:
            opened = self.open_bytes(base64.urlsafe_b64decode(sealed[len(_SECRET_PREFIX) :]), context)
            return None if opened is None else opened.decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return None

    def seal_bytes(self, plaintext: bytes, context: str) -> bytes:
        """``plaintext`` sealed as raw bytes (nonce + ciphertext + tag): for large values, no base64."""
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, plaintext, context.encode("utf-8"))

    def open_bytes(self, sealed: bytes, context: str) -> bytes | None:
        """What `seal_bytes` sealed, or None when sealed under another key or context, or altered."""
        try:
            return self._aead.decrypt(sealed[:12], sealed[12:], context.encode("utf-8"))
        except (ValueError, InvalidTag):
            return None
        try:
            raw = base64.urlsafe_b64decode(sealed[len(_SECRET_PREFIX) :])
            return self._aead.decrypt(raw[:12], raw[12:], context.encode("utf-8")).decode("utf-8")
        except (ValueError, InvalidTag, UnicodeDecodeError):
            return None
