"""Sharing extensions: a brain's members and audit log, and the caller's agent keys.

Every route is checked against ``store.auth.permissions`` through ``Sharing.authorize``:
members are visible to every member, changed by owners; the audit log is for owners;
agent keys are made, listed and revoked by their user (never with an agent key).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio.to_thread
from litestar import Request, delete, get, post, put
from litestar.types import ASGIApp

from store.audit import note
from store.auth.authenticate import Principal
from store.auth.users import AmbiguousEmail
from store.context import AppContext
from store.errors import ServiceError
from store.http import RawResponse, json_response
from store.routes.brains import json_body
from store.routes.common import ctx
from store.service import parse_brain_id
from store.sharing.registry import AgentKey, SharingError, expiry


async def _brain(
    request: Request[Any, Any, Any], action: str, caller: Principal | None = None
) -> tuple[AppContext, Principal, str, str]:
    """(context, caller, brain id, creator id) once the caller may do ``action`` on an existing brain."""
    c = ctx(request)
    p = caller or await c.authenticate(request.scope)
    c.sharing.require()
    bid = parse_brain_id(request.path_params["brain_id"])
    owner = c.sharing.authorize(p, bid, action)
    await c.run(c.service.get, owner, bid)  # 404 unless it exists
    return c, p, bid, owner


def _person(p: Principal) -> None:
    if p.key is not None:
        raise ServiceError(403, "an agent key cannot manage members or keys")


def _string(body: Any, name: str, *, required: bool = True) -> str:
    value = body.get(name) if isinstance(body, dict) else None
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value:
        raise ServiceError(400, f"{name} must be a non-empty string")
    return value


def _ambiguous(exc: AmbiguousEmail) -> ServiceError:
    """409 for an e-mail address several users have: the owner names the member otherwise
    (the other accounts are not listed: the operator's `brain-store share` names them)."""
    return ServiceError(409, f"several users have the e-mail address {exc.email.strip()!r}; nothing was changed. "
                             "Name the user by their name or id instead")


@get("/api/brains/{brain_id:str}/members")
async def list_members(request: Request[Any, Any, Any]) -> ASGIApp:
    """Who shares this brain and with which role (any member may look)."""
    c, _, bid, owner = await _brain(request, "members")
    return json_response(200, {"members": c.sharing.members(bid, owner)})


@put("/api/brains/{brain_id:str}/members")
async def set_member(request: Request[Any, Any, Any]) -> ASGIApp:
    """Add a member or change their role: body ``{"user": name|email|id, "role": ...}`` (owners)."""
    c, p, bid, owner = await _brain(request, "manage")
    _person(p)
    body = await json_body(request)
    try:
        user = c.sharing.find_user(_string(body, "user"))
    except AmbiguousEmail as exc:
        raise _ambiguous(exc) from None
    if user is None:
        raise ServiceError(404, "no such user")
    note(request.scope, member=user.id)
    role = _string(body, "role")
    try:
        await anyio.to_thread.run_sync(c.sharing.require().set_member, bid, owner, user.id, role)
    except SharingError as exc:
        raise ServiceError(400 if "role must" in str(exc) else 409, str(exc)) from None
    note(request.scope, role=role)  # one of the roles now: set_member refused any other
    await c.run(partial(c.sharing.record, bid, p, "member_set", member=user.id, member_name=user.name,
                        role=role))
    return json_response(200, {"members": c.sharing.members(bid, owner)})


@delete("/api/brains/{brain_id:str}/members/{user:str}", status_code=200)
async def remove_member(request: Request[Any, Any, Any]) -> ASGIApp:
    """Take a member off the brain (owners; any member may leave by naming themselves)."""
    c = ctx(request)
    p = await c.authenticate(request.scope)
    _person(p)
    try:
        who, ambiguous = c.sharing.find_user(request.path_params["user"]), None
    except AmbiguousEmail as exc:
        who, ambiguous = None, exc
    leaving = who is not None and who.id == p.user_id
    _, _, bid, _ = await _brain(request, "members" if leaving else "manage", p)
    if ambiguous is not None:  # said only to an owner, once the brain's permission is checked
        raise _ambiguous(ambiguous)
    if who is None:
        raise ServiceError(404, "no such member")
    note(request.scope, member=who.id)  # the id, not the name or e-mail address the path gave
    try:
        role = await anyio.to_thread.run_sync(c.sharing.require().remove_member, bid, who.id)
    except SharingError as exc:
        raise ServiceError(409 if "creator" in str(exc) else 404, str(exc)) from None
    await c.run(partial(c.sharing.record, bid, p, "member_removed", always=True, member=who.id,
                        member_name=who.name, role=role))
    return RawResponse(204)


@get("/api/brains/{brain_id:str}/audit")
async def brain_audit(request: Request[Any, Any, Any]) -> ASGIApp:
    """Uploads, restores, member and key changes of this brain, oldest first (owners)."""
    c, _, bid, _ = await _brain(request, "manage")
    if c.sharing.audit is None:
        raise ServiceError(501, "this store keeps no sharing audit log")
    events = await anyio.to_thread.run_sync(c.sharing.audit.events, bid)
    return json_response(200, {"events": events})


def key_record(key: AgentKey) -> dict[str, Any]:
    """An agent key as listed (never the key itself)."""
    return {"prefix": key.prefix, "brains": list(key.brains), "scope": key.scope, "label": key.label,
            "created_at": key.created_at, "expires_at": key.expires_at or None}


async def _keys_caller(request: Request[Any, Any, Any]) -> tuple[AppContext, Principal]:
    c = ctx(request)
    p = await c.authenticate(request.scope)
    _person(p)
    c.sharing.require()
    return c, p


@post("/api/keys")
async def create_key(request: Request[Any, Any, Any]) -> ASGIApp:
    """Create an agent key: ``{"brains": [...], "scope": "read"|"write", "label"?, "expires"?: "30d"}``;
    the key is in the answer once."""
    c, p = await _keys_caller(request)
    body = await json_body(request)
    brains = body.get("brains") if isinstance(body, dict) else None
    if not isinstance(brains, list) or not brains or not all(isinstance(b, str) for b in brains):
        raise ServiceError(400, "brains must be a non-empty list of brain ids")
    ids = []
    for given in brains:
        bid = parse_brain_id(given)
        await c.run(c.service.get, c.sharing.authorize(p, bid, "list"), bid)  # 404 unless a member
        ids.append(bid)
    note(request.scope, brains=list(dict.fromkeys(ids)))
    scope, label = _string(body, "scope"), _string(body, "label", required=False)
    try:
        expires = expiry(_string(body, "expires", required=False)) if body.get("expires") else ""
        key, token = await anyio.to_thread.run_sync(
            lambda: c.sharing.require().create_key(p.user_id, ids, scope, label=label, expires_at=expires))
    except SharingError as exc:
        raise ServiceError(400, str(exc)) from None
    note(request.scope, key=key.prefix, scope=scope)  # the prefix it is listed by, never the key
    for bid in key.brains:
        await c.run(partial(c.sharing.record, bid, p, "key_created", always=True, key=key.prefix, scope=scope,
                            label=label))
    return json_response(201, {**key_record(key), "key": token})


@get("/api/keys")
async def list_keys(request: Request[Any, Any, Any]) -> ASGIApp:
    """The caller's agent keys (prefix, brains, scope, label, dates)."""
    c, p = await _keys_caller(request)
    return json_response(200, {"keys": [key_record(k) for k in c.sharing.require().keys(p.user_id)]})


@delete("/api/keys/{prefix:str}", status_code=200)
async def revoke_key(request: Request[Any, Any, Any]) -> ASGIApp:
    """Revoke one of the caller's agent keys; it stops working at once."""
    c, p = await _keys_caller(request)
    try:
        key = await anyio.to_thread.run_sync(c.sharing.require().revoke_key, request.path_params["prefix"], p.user_id)
    except SharingError as exc:
        raise ServiceError(404, str(exc)) from None
    # the key's prefix once found: the path may hold anything, even a whole key given by mistake
    note(request.scope, key=key.prefix, brains=list(key.brains))
    for bid in key.brains:
        await c.run(partial(c.sharing.record, bid, p, "key_revoked", always=True, key=key.prefix))
    return RawResponse(204)


SHARING_ROUTES = [list_members, set_member, remove_member, brain_audit, create_key, list_keys, revoke_key]
