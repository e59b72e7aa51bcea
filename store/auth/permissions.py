"""Who may do what to a brain: the one permission table every brain route is checked against.

A caller's *role* on a brain is ``owner``, ``editor`` or ``viewer`` (see
``store.sharing.access`` for how it is found). An agent key adds a *scope*
(``read`` or ``write``); what the key may do is the intersection of the two.
Pure logic: no I/O, no HTTP.
"""

from __future__ import annotations

ROLES = ("viewer", "editor", "owner")
SCOPES = ("read", "write")

# action -> roles allowed. "list": see the brain's record (and find it in GET /api/brains);
# "members": see who shares it; "manage": change members, read its audit log.
PERMISSIONS: dict[str, frozenset[str]] = {
    "list": frozenset({"owner", "editor", "viewer"}),
    "download": frozenset({"owner", "editor", "viewer"}),
    "snapshots": frozenset({"owner", "editor", "viewer"}),
    "members": frozenset({"owner", "editor", "viewer"}),
    "upload": frozenset({"owner", "editor"}),
    "restore": frozenset({"owner"}),
    "delete": frozenset({"owner"}),
    "rename": frozenset({"owner"}),
    "manage": frozenset({"owner"}),
}

# scope -> actions an agent key may ever do. A key never restores, deletes or manages:
# those stay with the person (their own token or sign-in).
KEY_SCOPES: dict[str, frozenset[str]] = {
    "read": frozenset({"list", "download", "snapshots", "members"}),
    "write": frozenset({"list", "download", "snapshots", "members", "upload"}),
}


# The most an agent key of each scope can act as: a read key views, a write key edits.
SCOPE_ROLES: dict[str, str] = {"read": "viewer", "write": "editor"}


def effective_role(role: str | None, scope: str | None = None) -> str | None:
    """The role a caller acts with: ``role``, capped by an agent key's ``scope`` (None: no access).

    This is what listings report, so a client can tell a read key's brains are read-only.
    """
    if role is None or scope is None:
        return role
    cap = SCOPE_ROLES.get(scope)
    if cap is None or role not in ROLES:
        return None
    return min(role, cap, key=ROLES.index)


def permitted(action: str, role: str | None, scope: str | None = None) -> bool:
    """True when ``role`` (narrowed by an agent key's ``scope``, if any) allows ``action``.

    An unknown action, role or scope allows nothing.
    """
    if role is None or role not in PERMISSIONS.get(action, ()):
        return False
    return scope is None or action in KEY_SCOPES.get(scope, ())
