"""Deciding access to a brain: the caller's role (creator, member, or nobody), narrowed by
an agent key, checked against ``store.auth.permissions``; and the brain list with roles.

A brain id alone never grants anything: a caller with no role on a brain (or an agent
key not made for it) gets the same 404 as for a brain that does not exist, so ids do
not leak existence; a member whose role does not allow the action gets 403.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from store.auth.authenticate import Principal, unauthorized
from store.auth.permissions import ROLES, effective_role, permitted
from store.auth.users import UserRegistry
from store.errors import ServiceError
from store.service import brain_record
from store.sharing.audit import AuditLog
from store.sharing.registry import SharingRegistry
from store.storage.base import BrainMeta, StorageBackend, usable_meta

NOT_FOUND = "brain not found"


class Sharing:
    """Members, roles and agent keys of one store process."""

    def __init__(
        self, registry: SharingRegistry | None, users: UserRegistry, backend: StorageBackend,
        audit: AuditLog | None,
    ) -> None:
        self.registry = registry  # None: sharing is not available
        self.audit = audit
        self.users = users
        self.backend = backend

    def require(self) -> SharingRegistry:
        """The registry, or 501 when this store cannot share."""
        if self.registry is None:
            raise ServiceError(501, "sharing is not available on this store")
        return self.registry

    # -- who is calling ------------------------------------------------------------------

    def key_principal(self, token: str) -> Principal | None:
        """The caller of a live agent key whose user still exists, else None."""
        if self.registry is None:
            return None
        key = self.registry.by_key(token)
        if key is None:
            return None
        user = self.users.get(key.user_id)
        if user is None:
            return None
        return Principal(user.id, user.email, "agent-key", user.name, key=key)

    # -- may they? -----------------------------------------------------------------------

    def role(self, principal: Principal, brain_id: str) -> tuple[str, str | None]:
        """``(creator id, role)`` of the caller on a brain; role None: no access at all.

        An unshared brain answers ``(caller, "owner")`` without touching storage: the brain
        service then finds it only among the caller's own brains (404 otherwise).
        """
        key = principal.key
        if key is not None and brain_id not in key.brains:
            return principal.user_id, None
        share = self.registry.share(brain_id) if self.registry is not None else None
        if share is None or share.owner_id == principal.user_id:
            return principal.user_id, "owner"
        return share.owner_id, share.members.get(principal.user_id)

    def authorize(self, principal: Principal, brain_id: str, action: str) -> str:
        """The id of the user whose storage holds the brain, when the caller may do ``action``;
        else ServiceError 404 (no role) or 403 (a role that does not allow it)."""
        owner, role = self.role(principal, brain_id)
        if role is None:
            raise ServiceError(404, NOT_FOUND)
        scope = principal.key.scope if principal.key is not None else None
        if not permitted(action, role, scope):
            who = "this agent key" if principal.key is not None and permitted(action, role) else "your role"
            raise ServiceError(403, f"{who} does not allow {action} on this brain")
        return owner

    def acts_as_owner(self, principal: Principal, brain_id: str) -> bool:
        """True when the caller writes to the brain as an owner: an owner's own credential
        (an agent key acts at most as an editor)."""
        scope = principal.key.scope if principal.key is not None else None
        return effective_role(self.role(principal, brain_id)[1], scope) == "owner"

    def reauthorize(self, principal: Principal, token: str | None, brain_id: str, action: str) -> str:
        """``authorize`` again for a request authorised a while ago (an upload about to commit):
        its credential must still be the caller's (a revoked or expired agent key, a rotated
        token or a removed user: 401) and the *current* role must allow ``action`` (404/403).
        Memory only, no rate limit counted: the request was counted when it started."""
        if principal.key is not None:
            current = self.key_principal(token) if token else None
            if current is None or current.key.sha256 != principal.key.sha256:
                raise unauthorized("this agent key was revoked or has expired")
            principal = current
        elif principal.kind == "static":
            user = self.users.by_token(token) if token else None
            if user is None or user.id != principal.user_id:
                raise unauthorized("this token no longer works")
        elif self.users.get(principal.user_id) is None:
            raise unauthorized("this account was removed")
        return self.authorize(principal, brain_id, action)

    # -- what do they see? ---------------------------------------------------------------

    def listing(self, principal: Principal, own: list[BrainMeta]) -> list[dict[str, Any]]:
        """Contract brain records of the caller's own and shared brains, with ``role`` and
        ``owner`` (the creator's name) as extension members; an agent key sees its brains only."""
        entries: list[tuple[BrainMeta, str]] = [(m, "owner") for m in own]
        if self.registry is not None:
            for share in self.registry.shared_with(principal.user_id):
                meta = usable_meta(self.backend, share.owner_id, share.brain_id)
                if meta is not None and meta.user_id == share.owner_id and not meta.deleted_at:
                    entries.append((meta, share.members[principal.user_id]))
        key = principal.key
        return [
            self.record_of(principal, meta, role)
            for meta, role in entries
            if key is None or (meta.id in key.brains and permitted("list", role, key.scope))
        ]

    def record_of(self, principal: Principal, meta: BrainMeta, role: str | None = None) -> dict[str, Any]:
        """The contract brain record with the caller's ``role`` (an agent key's: capped by its
        scope) and the creator's name as ``owner``."""
        record = brain_record(meta)
        scope = principal.key.scope if principal.key is not None else None
        record["role"] = effective_role(role or self.role(principal, meta.id)[1], scope)
        record["owner"] = principal.name if meta.user_id == principal.user_id else self.user_name(meta.user_id)
        return record

    def forget_user(self, user_id: str, user_name: str, by: str, *,
                    unnoted: AbstractSet[str] = frozenset()) -> tuple[int, int]:
        """Drop a removed user's agent keys and memberships (``SharingRegistry.forget_user``) and
        note each in the audit log of the brain it concerned, as the operator's change (actor
        ``operator``, named ``by``: "operator (user remove)"), as `brain-store unshare` and
        `key revoke` note theirs; brains in ``unnoted`` are left out (a log copied from elsewhere).
        Returns (keys, memberships) dropped."""
        keys, memberships = self.require().forget_user(user_id)
        if self.audit is not None:
            for brain_id, role in memberships:
                if brain_id not in unnoted:
                    self.audit.record(brain_id, "operator", by, "member_removed", member=user_id,
                                      member_name=user_name, role=role)
            for key in keys:
                for brain_id in key.brains:
                    if brain_id not in unnoted:
                        self.audit.record(brain_id, "operator", by, "key_revoked", key=key.prefix, member=user_id)
        return len(keys), len(memberships)

    def forget(self, brain_id: str) -> None:
        """A brain was deleted: drop its members and its audit log."""
        if self.registry is not None:
            self.registry.forget_brain(brain_id)
        if self.audit is not None:
            self.audit.forget(brain_id)

    def find_user(self, who: str) -> Any:
        """A user by name, e-mail or id, or None (`UserRegistry.lookup`: an e-mail address first;
        AmbiguousEmail when several users have it)."""
        return self.users.lookup(who)

    def members(self, brain_id: str, creator_id: str) -> list[dict[str, str]]:
        """Who shares a brain: the creator first, then members by role (owners first) and name."""
        share = self.registry.share(brain_id) if self.registry is not None else None
        roles = [(creator_id, "owner"), *sorted((share.members if share else {}).items(),
                                                key=lambda m: (-ROLES.index(m[1]), self.user_name(m[0])))]
        out = []
        for user_id, role in roles:
            user = self.users.get(user_id)
            out.append({"id": user_id, "name": user.name if user else "", "email": user.email if user else "",
                        "role": role})
        return out

    def user_name(self, user_id: str) -> str:
        """A user's name ("" when the user is gone)."""
        user = self.users.get(user_id)
        return user.name if user is not None else ""

    def record(self, brain_id: str, principal: Principal, action: str, *, always: bool = False,
               **details: Any) -> None:
        """Audit an event of a shared brain (``always``: even when the brain is not shared)."""
        if self.audit is None or self.registry is None:
            return
        if not always and self.registry.share(brain_id) is None:
            return
        if principal.key is not None:
            details["key"] = principal.key.prefix
        self.audit.record(brain_id, principal.user_id, principal.name, action, **details)
