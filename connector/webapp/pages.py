"""HTML for the web app: Jinja2 templates with autoescaping, the static files, the headers.

The pages load nothing from anywhere else and run no code at all: one stylesheet
from ``/app/static/``, allowed by a strict Content-Security-Policy (``'self'``
only, no inline styles or scripts, no framing, no plugins). Every action is a
plain form post, so the app works with the keyboard and without JavaScript.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from functools import lru_cache
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from connector.engine.format.graphemes import shortened
from connector.engine.format.jsvalues import parse_iso_ms
from connector.engine.writes.memorize import MAX_CONTEXT_CHARS
from connector.i18n import (Text, current_locale, gettext, listing, number, readable_instant, size, switch_links, translate,
                            translations)
from connector.mcp.http import path_segment
from connector.webapp.labels import type_label

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)
STATIC_TYPES = {"app.css": "text/css; charset=utf-8", "fonts.css": "text/css; charset=utf-8", "icon.svg": "image/svg+xml"}


def page_headers() -> dict[str, str]:
    """Security headers of every app page (never cached: pages show private memories)."""
    return {
        "Content-Security-Policy": CSP,
        "X-Frame-Options": "DENY",
        "Cache-Control": "no-store",
        # same-origin, not no-referrer: under no-referrer browsers send "Origin: null" with forms.
        "Referrer-Policy": "same-origin",
        "X-Content-Type-Options": "nosniff",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cross-Origin-Resource-Policy": "same-origin",
        "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
    }


@lru_cache(maxsize=None)
def environment(locale: str = "en") -> Environment:
    """The template environment of one locale: autoescape on for every template, undefined
    names fail loudly, gettext from the locale's catalog (``{% trans %}``, ``_()``)."""
    env = Environment(
        loader=PackageLoader("connector.webapp", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.i18n"],
    )
    env.install_gettext_translations(translations(locale), newstyle=True)  # type: ignore[attr-defined]
    env.globals["static_version"] = static_version
    env.globals["locale"] = locale
    env.globals["languages"] = switch_links
    env.filters["when"] = lambda value: when(translate(value, locale) if isinstance(value, Text) else value, locale)
    # A message made in Python (a Text or a marked string), translated, escaped, its text parameters isolated.
    env.filters["t"] = lambda message: translated(message, locale)
    # Text people wrote (a title, a name, a tag), isolated from the text around it on its line.
    env.filters["bdi"] = isolate
    # A tag as shown: one longer than a tag may be written with (from an archive another client wrote) is cut.
    env.filters["tag"] = lambda value: shortened(value, MAX_CONTEXT_CHARS) if isinstance(value, str) else value
    env.filters["number"] = lambda value, pattern=None: number(value, locale, pattern)
    env.filters["size"] = lambda value: size(value, locale)
    env.filters["listing"] = lambda items: listing(items, locale)
    env.filters["segment"] = path_segment
    # A memory's type as people of the locale read it (the stored word stays in forms' values).
    env.filters["memory_type"] = lambda value: translate(type_label(value), locale) if isinstance(value, str) else value
    return env


def isolate(value: Any) -> Any:
    """Text people wrote (a memory's title, a brain's name, a tag), escaped, in a ``<bdi>``:
    its bidirectional controls (U+202E RIGHT-TO-LEFT OVERRIDE) stay inside it instead of
    reordering the labels after it on the line, and it takes its own direction from its first
    strong letter (an Arabic or Hebrew title reads right to left in its box). Anything but a
    non-empty string (None, a number) comes back unchanged. Never inside ``<title>`` or an
    attribute: there a tag is text."""
    if isinstance(value, str) and value:
        return Markup("<bdi>{0}</bdi>").format(value)
    return value


def translated(message: Any, locale: str) -> Any:
    """`translate`, with the text parameters of a `Text` (a file's name, a memory's title)
    isolated (`isolate`): the message's own words stay escaped text."""
    if isinstance(message, Text) and message.params:
        params = {name: isolate(value) for name, value in message.params.items()}
        return Markup(escape(gettext(message.msgid, locale))) % params
    return translate(message, locale)


_INSTANT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


def when(value: Any, locale: str = "en") -> Markup | str:
    """An ISO 8601 instant as people of ``locale`` read it, ``1 Mar 2026, 12:00 UTC``, in a
    ``<time>`` element carrying the exact instant (``datetime``, and as its tooltip); anything
    that is not an instant, or not one a date can hold, comes back unchanged (still escaped by the template)."""
    if not isinstance(value, str) or not _INSTANT.match(value):
        return value
    millis = parse_iso_ms(value)
    if millis is None:
        return value
    try:
        moment = datetime.fromtimestamp(millis / 1000, UTC)
    except (ValueError, OverflowError, OSError):
        return value  # valid ISO, outside the years a datetime holds (0001-01-01T00:00:00+14:00): shown as written
    readable = readable_instant(moment, locale)
    exact = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return Markup('<time datetime="{0}" title="{1}">{2}</time>').format(exact, value, readable)


def render(template: str, **context: Any) -> str:
    """One page, in the locale of the request."""
    return environment(current_locale()).get_template(template).render(**context)


@lru_cache(maxsize=None)
def static_file(name: str) -> bytes | None:
    """A file of ``connector/webapp/static`` by name (only the known ones), else None."""
    if name not in STATIC_TYPES:
        return None
    return resources.files("connector.webapp").joinpath("static", name).read_bytes()


@lru_cache(maxsize=None)
def static_version(name: str) -> str:
    """A short content hash, so a page names the exact static file it was written for."""
    data = static_file(name) or b""
    return hashlib.sha256(data).hexdigest()[:12]
