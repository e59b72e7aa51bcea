"""The example memories `brain-store dev` puts in the demo brain on its first start.

Written like any client writes: the engine's own ``brain_memorize`` operation builds the
brain (the reference `brain` command line's format), and the store receives it as an
upload with ``If-None-Match: *``, so nothing is written when the brain already holds
memories (a second start, or the person's own).
"""

from __future__ import annotations

from datetime import UTC, datetime

EXAMPLES: tuple[dict[str, object], ...] = (
    {
        "title": "Welcome to your brain",
        "content": "This is an example memory. Everything saved here is recalled by every assistant "
                   "connected to this brain: ask one to remember something, then ask another about it. "
                   "Forget this memory (web app, or brain_forget) once you have your own.",
        "type": "learning", "tags": ["example", "getting-started"],
    },
    {
        "title": "Example: I prefer short answers with code first",
        "content": "When I ask a programming question, show the code first and keep the explanation short.",
        "type": "preference", "tags": ["example", "style"],
    },
    {
        "title": "Example: the team deploys on Thursdays",
        "content": "Our team deploys to production on Thursday mornings, never on Fridays.",
        "type": "decision", "tags": ["example", "work"],
    },
)


def seed_examples(store_url: str, token: str) -> int:
    """Put the example memories in the demo user's first brain when it holds none yet;
    returns how many were added (0 when the brain already had an archive)."""
    import httpx

    from connector.engine.format.archive import pack_archive
    from connector.engine.format.brain import Brain
    from connector.engine.writes.ops import connector_memorize

    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=store_url, headers=headers, timeout=30.0) as client:
        brains = client.get("/api/brains")
        brains.raise_for_status()
        listed = sorted(brains.json(), key=lambda b: (b.get("created_at") or "", b["id"]))
        if not listed or listed[0].get("checksum"):
            return 0
        brain = Brain()
        now = datetime.now(UTC)
        for example in EXAMPLES:
            connector_memorize(str(example["content"]), title=str(example["title"]), type=str(example["type"]),
                               tags=list(example["tags"]),  # type: ignore[call-overload]
                               origin="user", agent="brain-store dev").apply(brain, now)
        answer = client.put(f"/api/brains/{listed[0]['id']}/sync", headers={"If-None-Match": "*"},
                            files={"brain": ("brain.tar.gz", pack_archive(brain), "application/gzip")})
        if answer.status_code == 412:
            return 0  # written meanwhile: the person's memories stay as they are
        answer.raise_for_status()
    return len(EXAMPLES)
