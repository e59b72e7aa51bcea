"""Credentials in text about to be memorized, found with detect-secrets' detectors.

A memory is synced to every device of the user and shown to every agent they use: a
cloud key or a password pasted into one must not be stored without the user knowing.
`find_credentials` names the kinds found, never the values, so the refusal that
reports them cannot leak them.

Detectors are detect-secrets' regular-expression ones (no network verification, no
entropy guessing, which flags ordinary ids and hashes), plus this system's own tokens.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

# Lines longer than this are scanned in overlapping pieces (the regexes stay linear, but
# a 50,000-character line of one token is cheaper cut up).
_PIECE = 4096
_OVERLAP = 256


class BrainTokenDetector(RegexBasedDetector):
    """This system's own credentials: store tokens, agent keys and the connector's access and refresh tokens."""

    secret_type = "Brain store or connector token"
    denylist = [
        re.compile(r"\bbs[tk]_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"),  # store tokens and agent keys
        re.compile(r"\bbc[ar]1_[A-Za-z0-9_.~-]{20,}"),
    ]


class ConnectionStringPasswordDetector(RegexBasedDetector):
    """Key-value connection strings carrying a password (ADO.NET, ODBC, libpq: ``Password=...;``)."""

    secret_type = "Connection string with a password"
    denylist = [re.compile(r"(?i)(?:^|[;\s])(?:password|pwd)\s*=\s*([^;\s'\"]{3,})")]


@lru_cache(maxsize=1)
def _detectors() -> tuple[RegexBasedDetector, ...]:
    return (
        AWSKeyDetector(), AzureStorageKeyDetector(), PrivateKeyDetector(), JwtTokenDetector(),
        BasicAuthDetector(), GitHubTokenDetector(), GitLabTokenDetector(), SlackDetector(),
        StripeDetector(), OpenAIDetector(), PypiTokenDetector(), NpmDetector(), SendGridDetector(),
        TwilioKeyDetector(), DiscordBotTokenDetector(), ArtifactoryDetector(), MailchimpDetector(),
        SquareOAuthDetector(), BrainTokenDetector(), ConnectionStringPasswordDetector(),
    )


def _pieces(text: str) -> list[str]:
    pieces = []
    for line in text.splitlines() or [""]:
        if len(line) <= _PIECE:
            pieces.append(line)
            continue
        for start in range(0, len(line), _PIECE - _OVERLAP):
            pieces.append(line[start : start + _PIECE])
    return pieces


def find_credentials(*texts: str) -> list[str]:
    """The kinds of credential found in ``texts`` (e.g. "AWS Access Key"), in detector order; never values."""
    found: dict[str, None] = {}
    pieces = [piece for text in texts if text for piece in _pieces(text)]
    for detector in _detectors():
        for piece in pieces:
            if any(True for _ in detector.analyze_string(piece)):
                found[detector.secret_type] = None
                break
    return list(found)


def _strings(value: Any) -> Iterable[str]:
    """Every string inside ``value`` (nested mappings and lists included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def credentials_in_memories(memories: Iterable[Any]) -> list[str]:
    """The kinds of credential in any text field of memories about to be written (``MemoryInput``:
    title, content, tags, source, project, task and the rest of its mapping); never values.

    The one check of every write path: the MCP tool, the web app's edit and import, the
    command line's memorize.
    """
    return find_credentials(*(text for memory in memories for text in _strings(memory.to_mapping())))


def credential_refusal(kinds: list[str]) -> str:
    """The first sentences of every refusal: what was found (kinds only) and why it is not stored."""
    return (f"Not saved: this looks like it contains a credential ({', '.join(kinds)}). Memories are synced to "
            "every device and shown to every agent the user connects, so credentials do not belong in them.")
