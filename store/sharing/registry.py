"""The sharing registry (``sharing.json``): members of shared brains and agent keys (hashes only).

Kept like the users registry, by one ``WatchedDocument`` in a ``DocumentStore``: every change
is one conditional edit (an ``flock`` shared by the CLI and every worker process on disk,
compare-and-swap on S3). On a directory readers look at the file on every call (one
``stat``), so a share, a role change or a revocation made anywhere on the host is seen by
every worker on its next request; on S3 a serving replica polls the object every
``poll_seconds``, so it is seen by every replica within about one poll interval. A damaged
document keeps its last good copy serving; a missing one means nothing is shared.
"""

from __future__ import annotations

import base64
import hmac
import logging
import secrets
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import msgspec

from common.docstore import DirectoryStore, DocumentStore
from common.docstore.watched import WatchedDocument
from common.textsafety import has_unsafe_chars
from store.auth.permissions import ROLES, SCOPES
from store.auth.tokens import hash_token
from store.auth.users import now_rfc3339

log = logging.getLogger("store.sharing")

KEY_PREFIX = "bsk_"
# How much of a key is shown in listings and names it for revocation ("bsk_" + 8 characters).
SHOWN_CHARS = 12
MAX_KEY_BRAINS = 100
MAX_LABEL_CHARS = 100
T = TypeVar("T")


class SharingError(Exception):
    """A sharing change that is not allowed (the message says why); nothing was changed."""


class Share(msgspec.Struct, omit_defaults=True):
    """One shared brain: its creator (always an owner, where its data lives) and its members."""

    brain_id: str
    owner_id: str
    members: dict[str, str] = msgspec.field(default_factory=dict)  # user id -> role (creator not listed)


class AgentKey(msgspec.Struct, frozen=True, omit_defaults=True):
    """An agent key: a token for some brains of one user, with a scope; stored hashed."""

    prefix: str
    sha256: str
    user_id: str
    brains: tuple[str, ...]
    scope: str
    created_at: str
    label: str = ""
    expires_at: str = ""  # RFC 3339 UTC (lexically comparable); empty: never

    def expired(self, now: str) -> bool:
        """True when the key's expiry has passed at ``now`` (RFC 3339 UTC)."""
        return bool(self.expires_at) and self.expires_at <= now


@dataclass(frozen=True)
class Merged:
    """What ``SharingRegistry.merge`` changed."""

    shares: int  # shares of brains not shared here before
    keys: int  # agent keys added
    members: int  # members added to brains shared here already
    removed_members: list[tuple[str, str]]  # (brain id, user id): brought earlier, gone from the source since
    removed_keys: list[AgentKey]  # brought earlier, revoked at the source since
    # each change by brain, for its audit log: (brain id, user id, role) given (new shares' members
    # included) or changed to the source's, and the keys added
    set_members: list[tuple[str, str, str]] = field(default_factory=list)
    added_keys: list[AgentKey] = field(default_factory=list)


# The sharing file's format; one written by a newer release is refused (see users.USERS_VERSION).
SHARING_VERSION = 1


class SharingDocument(msgspec.Struct):
    """The whole sharing file."""

    version: int = SHARING_VERSION
    shares: list[Share] = msgspec.field(default_factory=list)
    keys: list[AgentKey] = msgspec.field(default_factory=list)


def new_agent_key() -> str:
    """A fresh agent key from 32 random bytes."""
    return KEY_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode("ascii")


def is_agent_key(token: str) -> bool:
    """True when ``token`` has the shape of an agent key."""
    return token.startswith(KEY_PREFIX) and len(token) == len(KEY_PREFIX) + 43


class _Index:
    def __init__(self, doc: SharingDocument) -> None:
        self.doc = doc
        self.shares: dict[str, Share] = {s.brain_id: s for s in doc.shares}
        self.keys: dict[str, AgentKey] = {k.sha256: k for k in doc.keys}
        self.by_member: dict[str, list[Share]] = {}
        for share in doc.shares:
            for user_id in share.members:
                self.by_member.setdefault(user_id, []).append(share)


class SharingRegistry:
    """Reads and changes ``sharing.json`` in a document store (or a data directory)."""

    def __init__(self, docs: DocumentStore | Path, *, fsync: bool = True, poll_seconds: float | None = None) -> None:
        """``docs``: the store holding ``sharing.json`` (a path: that data directory, written
        with ``fsync``); ``poll_seconds``: answer reads from memory and let ``start_polling``
        look every so often (S3) instead of looking on every read (a directory)."""
        store = DirectoryStore(Path(docs), fsync=fsync) if isinstance(docs, (str, Path)) else docs
        self._index = _Index(SharingDocument())
        self._doc = WatchedDocument(store, "sharing.json", SharingDocument, what="sharing file", log=log,
                                    on_change=self._install, on_missing=self._forget_all,
                                    poll_seconds=poll_seconds, newest_version=SHARING_VERSION)
        self.path = self._doc.location  # for messages
        self._doc.check()

    def _install(self, doc: SharingDocument) -> None:
        self._index = _Index(doc)

    # -- reading (request path) ----------------------------------------------------------

    def refresh(self) -> None:
        """Look for changes (on a directory; on S3 the poller does); a missing document means
        nothing is shared."""
        self._doc.refresh()

    def damaged(self) -> str | None:
        """Why the document is not being read (damaged: its last good copy serves), else None."""
        self.refresh()
        return self._doc.damaged

    def start_polling(self) -> None:
        """Start the background poller (a serving replica with ``poll_seconds``); idempotent."""
        self._doc.start_polling("sharing-poller")

    def stop_polling(self) -> None:
        """Stop the poller (tests, shutdown)."""
        self._doc.stop_polling()

    def _forget_all(self) -> None:
        self._index = _Index(SharingDocument())

    def share(self, brain_id: str) -> Share | None:
        """The share record of a brain, or None when it is not shared."""
        self.refresh()
        return self._index.shares.get(brain_id)

    def shared_with(self, user_id: str) -> list[Share]:
        """Shares where ``user_id`` is a member (not the creator)."""
        self.refresh()
        return list(self._index.by_member.get(user_id, ()))

    def by_key(self, token: str) -> AgentKey | None:
        """The live (unexpired) agent key for ``token``; constant-time comparison of the hash."""
        if not is_agent_key(token):
            return None
        self.refresh()
        digest = hash_token(token)
        key = self._index.keys.get(digest)
        if key is None or not hmac.compare_digest(key.sha256, digest) or key.expired(now_rfc3339()):
            return None
        return key

    def keys(self, user_id: str | None = None) -> list[AgentKey]:
        """Agent keys (of one user when given), oldest first."""
        self.refresh()
        return [k for k in self._index.doc.keys if user_id is None or k.user_id == user_id]

    def unreadable(self) -> str | None:
        """Why neither the document nor its last good copy could be read (what this process holds
        is then not the store's state: a backup must not take it), else None."""
        self.refresh()
        return self._doc.unread

    def document(self) -> SharingDocument:
        """The whole current document (backups)."""
        self.refresh()
        return self._index.doc

    # -- changing ------------------------------------------------------------------------

    def replace(self, new: SharingDocument) -> None:
        """Make the document exactly ``new`` (restores), as one edit."""

        def change(doc: SharingDocument) -> None:
            doc.shares[:] = list(new.shares)
            doc.keys[:] = list(new.keys)

        # also over a damaged file: a restore is how it is repaired, and nothing of it is kept
        self._doc.edit(change, SharingError, replace_damaged=True)

    def merge(
        self, other: SharingDocument, *, brought_members: AbstractSet[tuple[str, str]] = frozenset(),
        brought_keys: AbstractSet[str] = frozenset(),
    ) -> Merged:
        """Bring ``other``'s shares and agent keys here (migrate), as one edit.

        A share of a brain not shared here is added whole; one shared on both sides gets the members
        it lacks here. What an earlier merge of the same source brought (``brought_members``: (brain id,
        user id); ``brought_keys``: key hashes) follows ``other``: a member takes its role there, and
        a member or key ``other`` no longer has goes (removed or revoked there since). Everything
        else here (the target's own members and keys) stays, so merging twice changes nothing."""
        theirs = {(share.brain_id, user_id): role for share in other.shares for user_id, role in share.members.items()}
        owners = {share.brain_id: share.owner_id for share in other.shares}
        their_keys = {key.sha256 for key in other.keys}

        def change(doc: SharingDocument) -> Merged:
            removed_keys = [key for key in doc.keys if key.sha256 in brought_keys and key.sha256 not in their_keys]
            doc.keys[:] = [key for key in doc.keys if key not in removed_keys]
            known = {key.sha256 for key in doc.keys}
            keys = [key for key in other.keys if key.sha256 not in known]
            doc.keys.extend(keys)
            removed_members: list[tuple[str, str]] = []
            set_members: list[tuple[str, str, str]] = []
            members = 0
            here = {share.brain_id: share for share in doc.shares}
            for share in doc.shares:
                for user_id in list(share.members):
                    pair = (share.brain_id, user_id)
                    if pair not in brought_members:
                        continue  # the target's own: left as it is
                    if pair not in theirs:
                        del share.members[user_id]
                        removed_members.append(pair)
                    elif share.members[user_id] != theirs[pair]:
                        share.members[user_id] = theirs[pair]  # a role changed there since
                        set_members.append((*pair, theirs[pair]))
            added = [Share(s.brain_id, s.owner_id, dict(s.members)) for s in other.shares if s.brain_id not in here]
            set_members.extend((s.brain_id, user_id, role) for s in added for user_id, role in s.members.items())
            for (brain_id, user_id), role in theirs.items():
                share = here.get(brain_id)
                if share is not None and share.owner_id == owners[brain_id] and user_id not in share.members:
                    share.members[user_id] = role
                    set_members.append((brain_id, user_id, role))
                    members += 1
            doc.shares[:] = [share for share in doc.shares if share.members] + added
            return Merged(len(added), len(keys), members, removed_members, removed_keys, set_members, keys)

        return self._edit(change)

    def _edit(self, change: Callable[[SharingDocument], T]) -> T:
        return self._doc.edit(change, SharingError)

    def set_member(self, brain_id: str, owner_id: str, user_id: str, role: str) -> Share:
        """Give ``user_id`` ``role`` on a brain created by ``owner_id`` (adding or changing)."""
        if role not in ROLES:
            raise SharingError(f"role must be one of {', '.join(ROLES)}")
        if user_id == owner_id:
            raise SharingError("the brain's creator is always an owner")

        def change(doc: SharingDocument) -> Share:
            for share in doc.shares:
                if share.brain_id == brain_id:
                    share.members[user_id] = role
                    return share
            share = Share(brain_id, owner_id, {user_id: role})
            doc.shares.append(share)
            return share

        return self._edit(change)

    def remove_member(self, brain_id: str, user_id: str) -> str:
        """Take ``user_id`` off a brain; returns the role they had."""

        def change(doc: SharingDocument) -> str:
            for i, share in enumerate(doc.shares):
                if share.brain_id != brain_id:
                    continue
                if user_id == share.owner_id:
                    raise SharingError("the brain's creator is always an owner and cannot be removed")
                role = share.members.pop(user_id, None)
                if role is None:
                    break
                if not share.members:
                    del doc.shares[i]
                return role
            raise SharingError("that user is not a member of this brain")

        return self._edit(change)

    def forget_brain(self, brain_id: str) -> None:
        """Drop a deleted brain's members (its keys simply stop matching it)."""
        if self.share(brain_id) is None:
            return

        def change(doc: SharingDocument) -> None:
            doc.shares[:] = [s for s in doc.shares if s.brain_id != brain_id]

        self._edit(change)

    def forget_user(self, user_id: str) -> tuple[list[AgentKey], list[tuple[str, str]]]:
        """A user was removed (or their id is handed to someone else): delete their agent keys
        and their memberships in other users' brains. Shares of brains they created stay
        (those brains are kept for ``brain-store user adopt``). Returns what was dropped, for
        the brains' audit logs: the keys, and the memberships as (brain id, role)."""

        def change(doc: SharingDocument) -> tuple[list[AgentKey], list[tuple[str, str]]]:
            keys = [k for k in doc.keys if k.user_id == user_id]
            doc.keys[:] = [k for k in doc.keys if k.user_id != user_id]
            dropped = []
            for share in doc.shares:
                if (role := share.members.pop(user_id, None)) is not None:
                    dropped.append((share.brain_id, role))
            doc.shares[:] = [s for s in doc.shares if s.members]
            return keys, dropped

        return self._edit(change)

    def create_key(
        self, user_id: str, brains: list[str], scope: str, *, label: str = "", expires_at: str = ""
    ) -> tuple[AgentKey, str]:
        """A new agent key; returns its record and the key itself (shown once, never stored)."""
        if scope not in SCOPES:
            raise SharingError(f"scope must be one of {', '.join(SCOPES)}")
        if not brains or len(brains) > MAX_KEY_BRAINS:
            raise SharingError(f"a key is for 1 to {MAX_KEY_BRAINS} brains")
        if len(label) > MAX_LABEL_CHARS or has_unsafe_chars(label):
            # no control, line-separator or bidirectional character: a label is shown on one line
            raise SharingError(f"a label is at most {MAX_LABEL_CHARS} printable characters")
        token = new_agent_key()
        key = AgentKey(
            prefix=token[:SHOWN_CHARS],
            sha256=hash_token(token),
            user_id=user_id,
            brains=tuple(dict.fromkeys(brains)),
            scope=scope,
            created_at=now_rfc3339(),
            label=label,
            expires_at=expires_at,
        )

        def change(doc: SharingDocument) -> None:
            doc.keys.append(key)

        self._edit(change)
        return key, token

    def revoke_key(self, prefix: str, user_id: str | None = None) -> AgentKey:
        """Delete the key shown as ``prefix`` (of ``user_id`` when given): it stops working at once."""

        def change(doc: SharingDocument) -> AgentKey:
            found = [i for i, k in enumerate(doc.keys)
                     if k.prefix == prefix and (user_id is None or k.user_id == user_id)]
            if not found:
                raise SharingError(f"no agent key {prefix!r}")
            if len(found) > 1:
                raise SharingError(f"{len(found)} keys start with {prefix!r}; revoke them by their user")
            return doc.keys.pop(found[0])

        return self._edit(change)


def expiry(text: str, now: datetime | None = None) -> str:
    """The RFC 3339 instant ``text`` from now (``30d``, ``12h``, ``90m``); SharingError when malformed."""
    text = text.strip().lower()
    units = {"d": 86400, "h": 3600, "m": 60}
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        raise SharingError("an expiry is a whole number followed by d, h or m (e.g. 30d)")
    seconds = int(text[:-1]) * units[text[-1]]
    if not 0 < seconds <= 3650 * 86400:
        raise SharingError("an expiry is between one minute and ten years")
    moment = (now or datetime.now(UTC)) + timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
