"""The users registry (``users.json``): who may use the store, with token hashes only.

The document lives in a ``DocumentStore`` (``common.docstore``): the data directory, or the
bucket of an S3 store (shared by every replica and the CLI), kept by one ``WatchedDocument``.
On a directory every read looks at the file (one ``stat``; re-read when it changed), so the
CLI's changes apply without a restart; on S3 a serving replica polls the object every
``poll_seconds`` (a conditional GET) and reads answer from memory, so a user added, rotated or
removed anywhere is seen by every replica within about one poll interval. A damaged document
never takes the server down: its last good copy keeps serving and the problem is logged
loudly. Every change is one conditional edit (an ``flock`` shared with the CLI on disk,
compare-and-swap on S3), written atomically with mode 0600 on disk.
"""

from __future__ import annotations

import hmac
import logging
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from common.docstore import DirectoryStore, DocumentStore
from common.docstore.watched import WatchedDocument
from common.textsafety import has_unsafe_chars
from store.auth.tokens import hash_token, new_token

log = logging.getLogger("store.users")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")
T = TypeVar("T")
# An unknown token makes a serving S3 replica look at the bucket at once (at most this often),
# so a user created a moment ago can sign in on any replica without waiting for the poller.
MISS_REFRESH_SECONDS = 0.25


class UsersFileError(Exception):
    """The users file cannot be read or a change to it is not allowed."""


class NoSuchUser(UsersFileError):
    """No user has the name or id a change was asked for (nothing was changed)."""

    def __init__(self, who: str) -> None:
        super().__init__(f"no user {who!r}")
        self.who = who


class EmailInUse(UsersFileError):
    """A new account would have the e-mail address of an existing one (nothing was created)."""


class AmbiguousEmail(UsersFileError):
    """Several users have the e-mail address a user was named by (data from before e-mail
    addresses had to be unique): refused with the choices rather than guessed."""

    def __init__(self, email: str, users: list[Any]) -> None:
        self.email = email
        self.users = users
        listed = ", ".join(f"{user.name} ({user.id})" for user in users)
        super().__init__(f"several users have the e-mail address {email.strip()!r}: {listed}; "
                         "nothing was changed. Name the user by their name or id instead.")


class User(msgspec.Struct, frozen=True, omit_defaults=True):
    """One account. ``token_sha256`` is empty for accounts that only sign in via OIDC."""

    id: str
    name: str
    created_at: str
    email: str = ""
    token_sha256: str = ""
    kind: str = "static"  # "static" | "oidc"
    oidc_issuer: str = ""
    oidc_subject: str = ""


class DeniedIdentity(msgspec.Struct, frozen=True):
    """An OIDC identity whose user was removed: it must not be re-created on the next token."""

    issuer: str
    subject: str
    removed_at: str
    user_id: str = ""  # what the removed user was, so `brain-store user allow` can name them
    name: str = ""
    email: str = ""


# The users file's format; one written by a newer release (a higher version) is refused, not
# rewritten without the fields this release does not know (``WatchedDocument``).
USERS_VERSION = 1


class UsersDocument(msgspec.Struct):
    """The whole users file."""

    version: int = USERS_VERSION
    users: list[User] = msgspec.field(default_factory=list)
    denied: list[DeniedIdentity] = msgspec.field(default_factory=list)




# "letters" alone read as any letters: 王小明 was refused by a rule that seemed to allow it.
NAME_RULE = "a user name is 1-128 ASCII letters (a-z, A-Z), digits or . _ @ + - (starting with a letter or digit)"


def name_problem(name: str, others: list[Any], user_id: str = "") -> str | None:
    """Why ``name`` cannot be a user's name beside ``others`` (users: id, name, e-mail; None: it can).

    One rule for every place a name is given (``user add``, ``adopt``, the reference import):
    no spaces, controls, line separators or bidirectional characters (a name is shown on one
    line in listings), not another user's name, and not another user's e-mail address (so a
    name never passes for someone's e-mail where users are looked up by either).
    """
    if not _NAME.match(name):
        return NAME_RULE
    for other in others:
        if other.id == user_id:
            continue
        if other.name == name:
            return f"a user named {name!r} already exists"
        if other.email and other.email.lower() == name.lower():
            return f"{name!r} is the e-mail address of another user"
    return None


def email_key(email: str) -> str:
    """How e-mail addresses are compared: trimmed, ignoring case ("" for none)."""
    return email.strip().lower()


def with_email(email: str, users: list[Any]) -> list[Any]:
    """The users (id, name, e-mail) whose e-mail address is ``email``, oldest first; none for ""."""
    key = email_key(email)
    return [user for user in users if key and email_key(user.email) == key]


def named(users: list[User], name_or_id: str) -> User | None:
    """The user of ``users`` whose name or id ``name_or_id`` is: trimmed (a name or id pasted with
    spaces around it), a name exactly (names differing in case are different users), an id also
    ignoring case (ids are UUIDs, written in lower case; one copied in upper case is the same id)."""
    wanted = name_or_id.strip()
    for user in users:
        if user.id == wanted or user.name == wanted:
            return user
    key = wanted.lower()
    return next((user for user in users if user.id.lower() == key), None) if key else None


EMAIL_RULE = "an e-mail address is at most 254 characters, without spaces, control or bidirectional characters"


def email_problem(email: str) -> str | None:
    """Why ``email`` cannot be a user's e-mail address (None: it can). It is shown on the user's
    line in listings beside the name, so it may not break or reorder that line either."""
    if len(email) > 254 or has_unsafe_chars(email) or any(char.isspace() for char in email):
        return EMAIL_RULE
    return None


def _refuse_new_user(users: list[Any], name: str, email: str, user_id: str | None) -> None:
    """Raise ``UsersFileError`` when a user ``name`` (``email``, ``user_id``) cannot join ``users``."""
    if not _NAME.match(name):
        raise UsersFileError(NAME_RULE)
    if (problem := email_problem(email)) is not None:
        raise UsersFileError(problem)
    if (problem := name_problem(name, users)) is not None:
        raise UsersFileError(problem)
    taken = with_email(email, users)
    if taken:
        raise EmailInUse(f"the e-mail address {email!r} is already used by the user {taken[0].name!r}; "
                         "nothing was created. Give this user another address, or none")
    if user_id is not None and any(u.id == user_id for u in users):
        raise UsersFileError(f"user id {user_id} is in use")


def now_rfc3339() -> str:
    """The current UTC time as an RFC 3339 string with microseconds."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Index:
    """Lookup tables built from one users document."""

    def __init__(self, doc: UsersDocument) -> None:
        self.doc = doc
        self.by_token: dict[str, User] = {u.token_sha256: u for u in doc.users if u.token_sha256}
        self.by_id: dict[str, User] = {u.id: u for u in doc.users}
        self.by_oidc: dict[tuple[str, str], User] = {
            (u.oidc_issuer, u.oidc_subject): u for u in doc.users if u.oidc_subject
        }
        self.denied: set[tuple[str, str]] = {(d.issuer, d.subject) for d in doc.denied}


class UserRegistry:
    """Reads and changes ``users.json`` in a document store (or a data directory)."""

    def __init__(self, docs: DocumentStore | Path, *, fsync: bool = True, poll_seconds: float | None = None) -> None:
        """``docs``: the store holding ``users.json`` (a path: that data directory, written with
        ``fsync``); ``poll_seconds``: answer reads from memory and let ``start_polling`` look
        every so often (S3) instead of looking on every read (a directory)."""
        store = DirectoryStore(Path(docs), fsync=fsync) if isinstance(docs, (str, Path)) else docs
        self._index = _Index(UsersDocument())
        self._doc = WatchedDocument(store, "users.json", UsersDocument, what="users file", log=log,
                                    on_change=self._install, on_missing=self._missing, poll_seconds=poll_seconds,
                                    newest_version=USERS_VERSION)
        self.path = self._doc.location  # for messages
        # recheck_token waits on the network (S3): call it in a worker thread
        self.blocking = poll_seconds is not None
        self._doc.check()

    def _install(self, doc: UsersDocument) -> None:
        self._index = _Index(doc)

    def _missing(self) -> None:
        log.error("users file %s disappeared; keeping the last good copy", self.path)

    # -- reading (server hot path) ---------------------------------------------------

    def refresh(self) -> None:
        """Look for changes (on a directory; on S3 the poller does); on a damaged or missing
        document keep the last good copy."""
        self._doc.refresh()

    def damaged(self) -> str | None:
        """Why the document is not being read (damaged: its last good copy serves), else None."""
        self.refresh()
        return self._doc.damaged

    def unreadable(self) -> str | None:
        """Why neither the document nor its last good copy could be read (what this process holds
        is then not the store's state: a backup must not take it), else None."""
        self.refresh()
        return self._doc.unread

    def by_token(self, token: str) -> User | None:
        """The user owning a static token (O(1); constant-time comparison of the hash)."""
        self.refresh()
        digest = hash_token(token)
        user = self._index.by_token.get(digest)
        if user is None or not hmac.compare_digest(user.token_sha256, digest):
            return None
        return user

    def recheck_token(self, token: str) -> User | None:
        """Look again for a token ``by_token`` did not know: a polling replica (``blocking``)
        fetches the latest copy first, at most every ``MISS_REFRESH_SECONDS``. On a directory
        ``by_token`` already looked."""
        if not self._doc.polling:
            return None
        user = self.by_token(token)
        if user is None and time.monotonic() - self._doc.last_fetch > MISS_REFRESH_SECONDS:
            try:
                self._doc.check()
            except Exception as exc:
                log.warning("cannot refresh the users file: %s", exc)
                return None
            user = self.by_token(token)
        return user

    def start_polling(self) -> None:
        """Start the background poller (a serving replica with ``poll_seconds``); idempotent."""
        self._doc.start_polling("users-poller")

    def stop_polling(self) -> None:
        """Stop the poller (tests, shutdown)."""
        self._doc.stop_polling()

    def get(self, user_id: str) -> User | None:
        """The user with this id."""
        self.refresh()
        return self._index.by_id.get(user_id)

    def by_oidc(self, issuer: str, subject: str) -> User | None:
        """The user bound to an OIDC identity."""
        self.refresh()
        return self._index.by_oidc.get((issuer, subject))

    def is_denied(self, issuer: str, subject: str) -> bool:
        """True when this OIDC identity's user was removed (it must stay out)."""
        self.refresh()
        return (issuer, subject) in self._index.denied

    def users(self) -> list[User]:
        """All users, oldest first."""
        self.refresh()
        return list(self._index.doc.users)

    def find(self, name_or_id: str) -> User | None:
        """A user by name or by id (`named`)."""
        return named(self.users(), name_or_id)

    def lookup(self, who: str) -> User | None:
        """A user by e-mail address, name or id, or None. Text with an ``@`` is an e-mail address
        first (trimmed, ignoring case): a user *named* like someone's e-mail never wins over the
        user whose e-mail it is. An address several users have raises AmbiguousEmail."""
        if "@" in who:
            found = with_email(who, self.users())
            if len(found) > 1:
                raise AmbiguousEmail(who, found)
            if found:
                return found[0]
        return self.find(who)

    # -- changing (CLI, OIDC first sight) ----------------------------------------------

    def _edit(self, change: Callable[[UsersDocument], T]) -> T:
        return self._doc.edit(change, UsersFileError)

    def edit(self, change: Callable[[UsersDocument], T]) -> T:
        """Apply ``change`` to the whole users document in one locked edit; returns its result.

        For the bulk tools (restore, reference import, migrate) that replace or merge
        many users at once; if ``change`` raises, nothing is written.
        """
        return self._edit(change)

    def replace(self, doc: UsersDocument) -> None:
        """Make the document exactly ``doc`` (restores), also over a damaged file: a restore is
        how an operator repairs one, and nothing of the old document is kept anyway."""

        def change(target: UsersDocument) -> None:
            target.users[:] = list(doc.users)
            target.denied[:] = list(doc.denied)

        self._doc.edit(change, UsersFileError, replace_damaged=True)

    def add(self, name: str, email: str = "", *, user_id: str | None = None) -> tuple[User, str]:
        """Create a static-token user; returns the user and the token (shown once).

        ``user_id`` reuses the id of a removed user, so the brains kept for it become the
        new user's (``brain-store user adopt``); by default the id is a new UUID.
        """
        _refuse_new_user([], name, email, None)  # the name's and address's form; the rest in the edit
        token = new_token()

        def change(doc: UsersDocument) -> User:
            _refuse_new_user(doc.users, name, email, user_id)  # against the document this edit changes
            user = User(
                id=user_id or str(uuid.uuid4()),
                name=name,
                email=email,
                token_sha256=hash_token(token),
                created_at=now_rfc3339(),
            )
            doc.users.append(user)
            return user

        return self._edit(change), token

    def check_add(self, name: str, email: str = "", *, user_id: str | None = None) -> None:
        """Raise the ``UsersFileError`` that ``add`` would raise now, changing nothing: for a command
        that changes something else first (``user adopt`` drops the former user's keys before the
        user exists again, so that those keys never work for the new user)."""
        _refuse_new_user(self.users(), name, email, user_id)

    def rotate(self, name_or_id: str) -> tuple[User, str]:
        """Give a user a new token; the old one stops working at once."""
        token = new_token()

        def change(doc: UsersDocument) -> User:
            user = named(doc.users, name_or_id)
            if user is None:
                raise NoSuchUser(name_or_id)
            i = doc.users.index(user)
            doc.users[i] = msgspec.structs.replace(user, token_sha256=hash_token(token))
            return doc.users[i]

        return self._edit(change), token

    def remove(self, name_or_id: str) -> User:
        """Remove a user (an OIDC user's identity is remembered as denied)."""

        def change(doc: UsersDocument) -> User:
            user = named(doc.users, name_or_id)
            if user is None:
                raise NoSuchUser(name_or_id)
            doc.users.remove(user)
            if user.oidc_subject:
                doc.denied.append(DeniedIdentity(user.oidc_issuer, user.oidc_subject, now_rfc3339(),
                                                 user.id, user.name, user.email))
            return user

        return self._edit(change)

    def denied(self) -> list[DeniedIdentity]:
        """Removed OIDC identities that stay out until allowed again."""
        self.refresh()
        return list(self._index.doc.denied)

    def allow(self, who: str) -> DeniedIdentity:
        """Lift the deny record of a removed OIDC user (by former user id, name, email or subject)."""

        def change(doc: UsersDocument) -> DeniedIdentity:
            for i, denied in enumerate(doc.denied):
                if who and who in (denied.user_id, denied.name, denied.email, denied.subject):
                    del doc.denied[i]
                    return denied
            raise UsersFileError(f"no removed OIDC user {who!r}")

        return self._edit(change)

    def add_oidc(self, user_id: str, issuer: str, subject: str, email: str, name: str) -> User | None:
        """The user for an OIDC identity, created on first sight; None when it was denied.

        An e-mail address another account already has does not stop it: the identity provider
        vouches for the person, and refusing would lock them out with no way for the operator to
        let them in. The address then names neither account (``lookup`` refuses it as ambiguous,
        so ``share --with ADDRESS`` cannot pick the wrong person); it is logged."""

        def change(doc: UsersDocument) -> User | None:
            if any(d.issuer == issuer and d.subject == subject for d in doc.denied):
                return None
            for user in doc.users:
                if user.oidc_issuer == issuer and user.oidc_subject == subject:
                    return user
            if with_email(email, doc.users):
                log.warning("first OIDC sign-in with an e-mail address another account has: the address "
                            "now names neither (share by name or id)")
            taken = {u.name for u in doc.users}
            base = name if _NAME.match(name) else "oidc-user"
            unique, n = base, 1
            while unique in taken:
                n += 1
                unique = f"{base}-{n}"
            user = User(
                id=user_id,
                name=unique,
                email=email,
                kind="oidc",
                oidc_issuer=issuer,
                oidc_subject=subject,
                created_at=now_rfc3339(),
            )
            doc.users.append(user)
            return user

        return self._edit(change)
