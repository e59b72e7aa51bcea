"""Each account's brains: listing them, choosing the active one (or the one a connection is
bound to), switching it (brain_use), and who the account is at the store (a writer's name).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from common.brainnames import brain_name_key
from common.textsafety import escape_one_line
from connector.workcopy.core import BrainUnavailable, ManagerCore, UserState
from connector.workcopy.model import STATUS_MULTIPLE, STATUS_NO_BRAIN, STATUS_OK, Account, Identity
from connector.workcopy.store_client import BrainRecord, StoreError, StoreUnreachable

log = logging.getLogger("connector.workcopy")


class UnknownBrain(Exception):
    """brain_use named no brain of this account; carries the names to offer."""

    def __init__(self, wanted: str, brains: list[BrainRecord], message: str | None = None) -> None:
        self.wanted = wanted
        self.brains = brains
        names = ", ".join(f"{escape_one_line(b.name)} ({b.id})" for b in brains) or "none"
        super().__init__(message or f"No brain named '{escape_one_line(wanted)}' in this account. Brains: {names}.")


class AmbiguousBrain(UnknownBrain):
    """A name several brains of this account answer to (none of them the caller's own, or several
    of its own): refused with the choices, each by id and owner, its last change and archive size
    (one owner's two are told apart by those), rather than guessed."""

    def __init__(self, wanted: str, choices: list[BrainRecord]) -> None:
        listed = "; ".join(f"{escape_one_line(b.name)} ({b.id}{_told_apart(b)})" for b in choices)
        super().__init__(wanted, choices, f"Several brains are named '{escape_one_line(wanted)}': {listed}. "
                                          "Nothing was used; name one by its id (brain_use <id>, or the URL "
                                          "/mcp/brains/<id>).")


def _told_apart(record: BrainRecord) -> str:
    """What tells a brain from others of its name, from its record as listed (as the store's command
    line does: owner, last change, archive size): ", owned by alice, last change <when>, 123 bytes"."""
    owner = f", owned by {escape_one_line(record.owner)}" if record.owner else ""
    # A brain never written to changed last when it was made.
    changed = escape_one_line(record.last_synced_at or record.created_at or "unknown")
    return f"{owner}, last change {changed}, {record.size_bytes} bytes"


def oldest_first(brains: list[BrainRecord]) -> list[BrainRecord]:
    """Brains ordered oldest first: by creation time, then id."""
    return sorted(brains, key=lambda b: (b.created_at, b.id))


def is_own(record: BrainRecord, me: str | None) -> bool:
    """Whether the caller created ``record`` (``me``: the caller's name at the store, None when
    unknown). A store without sharing lists no role: every brain is the caller's. Without the
    name, only the owner role counts (an editor or viewer is never the creator)."""
    if record.role is None:
        return True
    if me is not None:
        return bool(record.owner) and record.owner == me
    return record.role == "owner"


def choose_brain(brains: list[BrainRecord], chosen_id: str | None, me: str | None = None, *,
                 key_brain: str = "") -> BrainRecord | None:
    """The chosen brain when it still exists, else the caller's own oldest one, else None.

    A brain shared with the caller is used only when chosen (brain_use) or named (a brain's
    URL): a share never changes where a connection that chose nothing reads or writes (an
    account with only shared brains gets its own on its first write). An agent key made for
    one brain (``key_brain``) reaches that brain alone for good and cannot create another: it
    is the key's brain, even a brain shared with the key's user."""
    if chosen_id:
        for brain in brains:
            if brain.id == chosen_id.lower():
                return brain
    ordered = oldest_first([b for b in brains if is_own(b, me)])
    if ordered:
        return ordered[0]
    return next((brain for brain in brains if key_brain and brain.id == key_brain), None)


def find_brain(brains: list[BrainRecord], wanted: str, me: str | None = None) -> BrainRecord | None:
    """A brain by id (any case), else by name (`brain_name_key`: NFC, surrounding spaces
    dropped), else by name ignoring case.

    Among brains of that name the caller's own one wins (a share never takes a name that
    already pointed at the caller's brain); several others by that name raise AmbiguousBrain
    with the choices, never a guess."""
    text = wanted.strip()
    for brain in brains:
        if brain.id == text.lower():
            return brain
    exact, folded = brain_name_key(text), brain_name_key(text, ignore_case=True)
    matches = (lambda b: brain_name_key(b.name) == exact, lambda b: brain_name_key(b.name, ignore_case=True) == folded)
    # The caller's own brains first, by exact name and then ignoring case: a shared brain whose
    # name matches exactly never takes the name from the caller's own `Work` reached as `work`.
    for same in matches:
        own = [b for b in brains if same(b) and is_own(b, me)]
        if len(own) == 1:
            return own[0]
        if len(own) > 1:
            raise AmbiguousBrain(wanted, oldest_first(own))
    for same in matches:
        named = [b for b in brains if same(b)]
        if len(named) > 1:
            raise AmbiguousBrain(wanted, oldest_first(named))
        if named:
            return named[0]
    return None


class AccessLost(BrainUnavailable):
    """A brain shared with the account is gone from its brain list since the connector last listed
    it: its owner removed the account from it, or the brain was deleted. The message is safe to
    show; nothing was read or changed."""

    def __init__(self, record: BrainRecord) -> None:
        owner = f", shared by {escape_one_line(record.owner)}" if record.owner else ""
        super().__init__(
            f"You no longer have access to the brain '{escape_one_line(record.name)}' ({record.id}){owner}: "
            "its owner removed you from it, or it was deleted. Nothing was read or changed. brain_status lists "
            "the brains you can use and brain_use switches to one; until you choose one, your own brain is used."
        )
        self.record = record


def viewer_refusal(record: BrainRecord) -> str:
    """Why a write to a brain the user only views is refused (before anything is attempted)."""
    owner = f", shared by {escape_one_line(record.owner)}" if record.owner else ""
    return (
        f"Not saved: you are a viewer of the brain '{escape_one_line(record.name)}'{owner}. A viewer can recall and "
        "read it but not change it; nothing was changed. Ask its owner for the editor role, or switch to one of "
        "your own brains with brain_use."
    )


def agent_key_without_brain(brains: list[BrainRecord]) -> str:
    """Why a write of an agent key that has no brain in use is refused (a key cannot create one)."""
    names = ", ".join(f"'{escape_one_line(b.name)}' ({b.id})" for b in oldest_first(brains))
    reaches = (f"it reaches {names}, none of them its user's own" if names
               else "it reaches no brain (deleted, or no longer shared with its user)")
    return (
        f"Not saved: an agent key cannot create a brain, and this one has none in use: {reaches}. "
        "Choose one with brain_use, or use the brain's URL (/mcp/brains/<name>); nothing was changed."
    )


def _signed_in_with_key(who: tuple[str, str] | None) -> bool:
    """Whether the store said (``GET /auth/me``: who, kind) the account is an agent key."""
    return who is not None and who[1] == "agent-key"


def empty_brain_note(name: str) -> str:
    """What a new user reads while the brain in use holds nothing yet: what to do next."""
    return (
        f"Your brain '{escape_one_line(name)}' is ready and empty: nothing is saved yet. Ask your assistant to "
        "remember something (brain_memorize), or add a memory in the web app (New memory); every assistant "
        "connected to this brain can then recall it."
    )


def identity_for(account: Account, brains: list[BrainRecord], active: BrainRecord | None) -> Identity:
    """The identity signal of section 5: status and the note the user should see.

    An account with no brain at all may be a different account than the one used elsewhere:
    that is warned about. An account whose brain exists but is empty is a new user: it gets a
    welcome saying what to do next, not a warning."""
    label = account.kind_label
    if not brains:
        note = (
            f"This account (signed in with {label}) has no brain at the store yet. "
            "Probably a different account is signed in than the one used elsewhere, or this is a new user. "
            "The first memory saved creates one."
        )
        return Identity(STATUS_NO_BRAIN, note, tuple(brains), active.id if active else None, empty=True)
    if active is None:
        # Only brains shared with the account: none is used until chosen (see choose_brain).
        shared = ", ".join(f"'{escape_one_line(b.name)}' ({b.id}" + (f", shared by {escape_one_line(b.owner)}"
                                                                    if b.owner else "") + ")" for b in brains)
        note = (
            f"This account (signed in with {label}) has no brain of its own yet; shared with it: {shared}. "
            "The first memory saved creates its own brain; brain_use <id> switches to a shared one."
        )
        return Identity(STATUS_NO_BRAIN, note, tuple(brains), None, empty=True)
    empty = active is not None and not active.checksum
    welcome = empty_brain_note(active.name) if empty and active is not None else None
    if len(brains) > 1 and active is not None:
        note = (
            f"This account (signed in with {label}) has {len(brains)} brains; serving '{escape_one_line(active.name)}' "
            f"({active.id}). Use brain_use to switch."
        )
        return Identity(STATUS_MULTIPLE, f"{note} {welcome}" if welcome else note, tuple(brains), active.id,
                        empty=empty)
    return Identity(STATUS_OK, welcome, tuple(brains), active.id if active else None, empty=empty)


class Accounts(ManagerCore):
    """Each account's brains: the list the store gives, the one in use, who the account is."""

    def _brains_ttl_s(self, state: UserState) -> float:
        """How long a brain list is served without asking the store: an agent key's not at all, so
        a revoked key (or its user's lost role) is refused at its next call, web pages and OAuth
        sign-ins made with it included, as a key presented at /mcp is (checked on every request)."""
        return 0.0 if _signed_in_with_key(state.who) else self.tuning.brains_ttl_s

    @staticmethod
    def _shared_held(state: UserState, wanted: str | None) -> BrainRecord | None:
        """The brain ``wanted`` (a brain_use choice, or a URL's name or id) names in the list held,
        when it is shared with the account rather than its own; else None.

        Such a brain is listed again on every call (like an agent key's): its owner may remove
        the member at any moment, at the store, where the connector cannot see it, and keeping
        the list 30 seconds let a removed member read it for that long. The account's own
        brains keep the cached list (most calls: no store round trip)."""
        if not wanted or state.brains is None:
            return None
        me = state.who[0] or None if state.who is not None else None
        try:
            found = find_brain(state.brains, wanted, me)
        except AmbiguousBrain:
            return None
        return found if found is not None and not is_own(found, me) else None

    def _let_go(self, subject: str, brain_id: str) -> None:
        """Drop the account's copy of a brain it may no longer read (and its recall index) now,
        not after the idle purge: nothing may serve it again. A copy holding writes stays: its
        push is refused by the store and the user told (`held.py`)."""
        copy = self._copies.get((subject, brain_id))
        if copy is None or copy.dirty or copy.lock.locked():
            return
        del self._copies[(subject, brain_id)]
        self._forget_index(copy)
        self.long_lived.dropped()

    async def _brains_for(self, subject: str, state: UserState, wanted: str | None, *, force: bool) -> list[BrainRecord]:
        """The brain list for a call on ``wanted`` (a choice or a URL's brain): listed afresh when
        that is a brain shared with the account (``_shared_held``); ``AccessLost``, the copy let go,
        when the fresh list no longer has it."""
        held = self._shared_held(state, wanted)
        brains = await self._brains(state, force=force, every_call=held is not None)
        if held is not None and not any(brain.id == held.id for brain in brains):
            self._let_go(subject, held.id)
            raise AccessLost(held)
        return brains

    async def _brains(self, state: UserState, *, force: bool = False, every_call: bool = False) -> list[BrainRecord]:
        """The account's brain list: the one held while younger than its TTL (none with ``every_call``),
        else the store's; the last one known while the store cannot be reached."""
        ttl = 0.0 if every_call else self._brains_ttl_s(state)
        fresh = self._mono() - state.brains_at < ttl
        if state.brains is not None and fresh and not force:
            return state.brains
        try:
            with self._watching(state.account):
                state.brains = await self.store.list_brains(state.account.credential)
            state.brains_at = self._mono()
            state.brains_stale = False
        except StoreUnreachable:
            if state.brains is None:
                raise
            # Keep serving the last known list; look again in a few seconds, not on every call.
            state.brains_at = self._mono() - ttl + min(5.0, self.tuning.brains_ttl_s)
            state.brains_stale = True
            log.warning("store unreachable while listing brains; using the last known list")
        return state.brains

    async def _active(self, account: Account, *, force_list: bool = False) -> tuple[list[BrainRecord], BrainRecord | None]:
        if account.brain:
            return await self._bound(account, force_list=force_list)
        state = self._user(account)
        assert state.lock is not None
        chosen = await self.choices.get_chosen_brain(account.subject)
        async with state.lock:
            # A shared brain just lost is refused once (AccessLost); after that the list lacks it and
            # the choice falls back as below.
            brains = await self._brains_for(account.subject, state, chosen, force=force_list)
            if chosen and chosen != state.missing_choice and not any(brain.id == chosen.lower() for brain in brains):
                # Chosen through another worker or replica (the choice is shared) after this one
                # listed the brains, e.g. a brain created since: list again, once per such choice
                # (a chosen brain deleted at the store must not cost a listing on every call).
                state.missing_choice = chosen
                brains = await self._brains(state, force=True)
        me = await self._me(account, brains)
        active = choose_brain(brains, chosen, me)
        if active is None and brains and await self._is_agent_key(account):  # asked only then
            active = choose_brain(brains, chosen, me, key_brain=state.key_brain)
        return brains, active

    async def _is_agent_key(self, account: Account) -> bool:
        """Whether the account signed in with an agent key (the store says, ``GET /auth/me``)."""
        return _signed_in_with_key(await self._who(account))

    async def _me(self, account: Account, brains: list[BrainRecord]) -> str | None:
        """The caller's name at the store, which tells its own brains from those shared with it
        (see `is_own`); asked only of a store that shares brains, None when it cannot say."""
        if all(brain.role is None for brain in brains):
            return None
        who = await self._who(account)
        return who[0] or None if who is not None else None

    async def _bound(self, account: Account, *, force_list: bool = False) -> tuple[list[BrainRecord], BrainRecord]:
        """A connection bound to one brain (``/mcp/brains/{brain}``): that brain alone, by id or name.

        A brain created or shared since the last listing is looked for once more (once per
        such name: asking again and again for a brain that is not there must not cost a
        listing each time); one the account cannot see raises UnknownBrain, the same
        whether it exists or not.
        """
        state = self._user(account)
        assert state.lock is not None
        async with state.lock:
            brains = await self._brains_for(account.subject, state, account.brain, force=force_list)
            found = find_brain(brains, account.brain, await self._me(account, brains))
            if found is None and not force_list and state.missing_choice != account.brain:
                state.missing_choice = account.brain
                brains = await self._brains(state, force=True)
                found = find_brain(brains, account.brain, await self._me(account, brains))
        if found is None:
            raise UnknownBrain(account.brain, oldest_first(brains))
        return [found], found

    async def bound_brain(self, account: Account) -> BrainRecord | None:
        """The brain a bound connection names when this account can see it, else None; AmbiguousBrain
        when the name is several brains' (none of them the account's own); AccessLost when it was a
        brain shared with the account that the account just lost."""
        try:
            _, found = await self._bound(account)
        except AmbiguousBrain:
            raise
        except UnknownBrain:
            return None
        return found

    async def pinned(self, account: Account) -> Account:
        """``account`` addressing the brain it uses now by that brain's id, as a connection bound to
        it (``/mcp/brains/{id}``) does; unchanged while it has no brain (its first write makes one).

        A call that checks or shows a brain and then writes (brain_extract waiting on a model, a
        page and its form) resolves the brain once with this: a brain_use from another client of
        the same account in between must not send the write into the brain it switched to."""
        _, active = await self._active(account)
        return replace(account, brain=active.id) if active is not None else account

    async def brain_id_of(self, subject: str, credential: str, brain: str) -> str:
        """The id of the brain ``brain`` (a name or id) names for this account now; "" when none
        does, several do, or the store cannot say (a sign-in for a brain's URL keeps the id)."""
        try:
            found = await self.bound_brain(Account(subject=subject, credential=credential, brain=brain))
        except (UnknownBrain, AccessLost, StoreError):
            return ""
        return found.id if found is not None else ""

    async def use_brain(self, account: Account, wanted: str) -> tuple[BrainRecord, Identity]:
        """Switch the user's brain (by name or id) and persist the choice."""
        state = self._user(account)
        assert state.lock is not None
        async with state.lock:
            brains = await self._brains(state, force=True)
        found = find_brain(brains, wanted, await self._me(account, brains))
        if found is None:
            raise UnknownBrain(wanted, oldest_first(brains))
        await self.choices.set_chosen_brain(account.subject, found.id)
        copy = await self._copy_for(account, found)
        if copy is not None:
            async with copy.lock:
                await self._refresh(copy, force=True)
        return found, identity_for(account, brains, found)

    async def pull_now(self, account: Account) -> None:
        """Read the brain ``account`` addresses from the store again at once (after a change made
        at the store itself, e.g. a snapshot restored), without switching the brain in use:
        ``account`` may address another brain (a web page shown for it, by id)."""
        _, found = await self._active(account, force_list=True)
        copy = await self._copy_for(account, found)
        if copy is not None:
            async with copy.lock:
                await self._refresh(copy, force=True)

    async def brains(self, account: Account) -> tuple[list[BrainRecord], BrainRecord | None]:
        """The account's brains (refreshed) and the active one."""
        return await self._active(account, force_list=True)

    async def writer(self, account: Account) -> str:
        """How a memory written to the active brain names its writer: the store's name for the
        account (``alice``, ``alice via an agent key``) when the store shares brains, else "".

        Asked once per account (``GET /auth/me``); a failure leaves it unnamed, never blocks the write.
        """
        try:
            _, active = await self._active(account)
        except (StoreError, UnknownBrain):  # a brain addressed by id that is gone: the write says so
            return ""
        if active is None or active.role is None:
            return ""
        who = await self._who(account)
        if who is None:
            return ""
        name, kind = who
        return f"{name} via an agent key" if name and kind == "agent-key" else name

    async def _who(self, account: Account) -> tuple[str, str] | None:
        """The account's name and kind (``static``, ``oidc``, ``agent-key``) at the store, asked
        once (``GET /auth/me``); None when the store cannot say."""
        state = self._user(account)
        if state.who is None:
            try:
                with self._watching(account):
                    me = await self.store.me(account.credential)
            except StoreError:
                return None
            user = me.get("user") if isinstance(me.get("user"), dict) else {}
            name = next((str(user[k]) for k in ("name", "email", "id") if isinstance(user.get(k), str) and user[k]), "")
            state.who = (name, str(user.get("kind") or ""))
            key = me.get("key") if isinstance(me.get("key"), dict) else {}
            made_for = key.get("brains")
            if isinstance(made_for, list) and len(made_for) == 1 and isinstance(made_for[0], str):
                state.key_brain = made_for[0].lower()
        return state.who

    async def _read_only_refusal(self, account: Account, record: BrainRecord) -> str:
        """Why a write to a brain this account may only read is refused: a viewer's role, or a
        read-only agent key (of the brain's owner: then the role is not the reason at all)."""
        who = await self._who(account)
        if who is None or not _signed_in_with_key(who):
            return viewer_refusal(record)
        name = escape_one_line(record.name)
        if record.owner and record.owner == who[0]:
            reason = f"this connection uses a read-only agent key for the brain '{name}' (your own brain)"
        else:
            reason = (f"this connection's agent key may only read the brain '{name}' (a read-only key, "
                      "or its user is a viewer of the brain)")
        return (
            f"Not saved: {reason}. It can recall and read but not change the brain; nothing was changed. "
            "For this agent to write, sign it in with an agent key created with write access "
            "(brain-store key create --scope write)."
        )
