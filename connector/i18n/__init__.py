"""The language of the connector's pages: choice, catalogs, and dates and numbers in it.

The pages (web app, web sign-in, OAuth sign-in) speak English, simplified Chinese and
Japanese. A request's locale is, in order: a ``lang`` query parameter (the switch on every
page; it is kept in a cookie), the cookie, the browser's ``Accept-Language`` negotiated with
Babel, else English. `LocaleMiddleware` decides it once per request and keeps it in a context
variable, so rendering code asks `current_locale()` instead of threading the request through.

Catalogs are the ``.po`` files under ``connector/i18n/locale``, compiled in memory at first
use with Babel's own reader and writer (no build step, nothing generated to commit). English
needs none: the messages are English. Messages made in Python are `Text` (a message with its
parameters, translated when shown) or plain strings marked with `N_` for extraction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from gettext import NullTranslations
from importlib import resources
from io import BytesIO
from typing import Any
from urllib.parse import parse_qsl, urlencode

from babel import Locale, UnknownLocaleError
from babel.core import get_global
from babel.dates import format_date, format_datetime, format_time
from babel.lists import format_list
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import format_decimal
from babel.support import Translations
from babel.units import format_unit

DEFAULT_LOCALE = "en"
# Each locale (a BCP 47 tag, as in <html lang>) with its own name, as the switch shows it.
LOCALES: dict[str, str] = {"en": "English", "zh-Hans": "简体中文", "ja": "日本語"}
# The catalog directory of each translated locale (gettext's spelling).
CATALOG_DIRS = {"zh-Hans": "zh_Hans", "ja": "ja"}
COOKIE_NAME = "brain_lang"
COOKIE_AGE_S = 365 * 24 * 3600
QUERY_NAME = "lang"
# The paths whose pages are localised (the middleware leaves the rest alone).
PAGE_PREFIXES = ("/app", "/authorize", "/oidc/callback")
STATIC_PREFIX = "/app/static/"  # the same in every language (cached without Vary)
MAX_ACCEPT_CHARS = 1000

_locale: ContextVar[str] = ContextVar("brain_locale", default=DEFAULT_LOCALE)
# The address of this page for the language switch (a GET's own path and query, else None).
_here: ContextVar[str | None] = ContextVar("brain_locale_here", default=None)


def N_(message: str) -> str:
    """Mark a message for extraction; it is translated where it is shown (`translate`)."""
    return message


class Text(str):
    """A message with parameters, translated when shown: reads as its English text anywhere
    else (logs, ``str()``), so code that treats it as a string keeps working."""

    msgid: str
    params: dict[str, Any]

    def __new__(cls, msgid: str, **params: Any) -> Text:
        """``msgid`` uses ``%(name)s`` placeholders filled from ``params``."""
        made = super().__new__(cls, msgid % params if params else msgid)
        made.msgid = msgid
        made.params = params
        return made


# ----- choosing the locale -------------------------------------------------------------


def _quality(value: str) -> float:
    try:
        quality = float(value)
    except ValueError:
        return 0.0
    return quality if 0.0 <= quality <= 1.0 else 0.0


def preferences(accept_language: str | None) -> list[str]:
    """The language tags of an ``Accept-Language`` header, most wanted first (q=0 dropped)."""
    ranked: list[tuple[float, int, str]] = []
    for position, item in enumerate((accept_language or "")[:MAX_ACCEPT_CHARS].split(",")):
        tag, _, rest = item.strip().partition(";")
        quality = 1.0
        for parameter in rest.split(";"):
            name, _, value = parameter.strip().partition("=")
            if name.strip().lower() == "q":
                quality = _quality(value.strip())
        if tag.strip() and tag.strip() != "*" and quality > 0:
            ranked.append((-quality, position, tag.strip()))
    return [tag for _, _, tag in sorted(ranked)]


@lru_cache(maxsize=1024)  # browsers send the same few tags; Babel's parsing is the costly part
def supported(tag: str | None) -> str | None:
    """The locale we serve for a language tag, or None: Babel parses the tag and fills in the
    likely script (``zh-CN`` and ``zh`` are written in Hans, ``zh-TW`` in Hant, which we lack)."""
    if not tag or len(tag) > 35:
        return None
    try:
        parsed = Locale.parse(tag.replace("_", "-"), sep="-")
    except (UnknownLocaleError, ValueError, TypeError):
        return None
    script = parsed.script
    if script is None:
        likely = get_global("likely_subtags")
        full = likely.get(f"{parsed.language}_{parsed.territory}") if parsed.territory else None
        full = full or likely.get(parsed.language) or ""
        script = next((part for part in full.split("_")[1:] if len(part) == 4), None)
    for locale in LOCALES:
        wanted = Locale.parse(locale, sep="-")
        if wanted.language == parsed.language and (wanted.script is None or wanted.script == script):
            return locale
    return None


def negotiate(accept_language: str | None) -> str:
    """The locale for a browser's ``Accept-Language``: its first wish we serve, else English."""
    return next((locale for tag in preferences(accept_language) if (locale := supported(tag))), DEFAULT_LOCALE)


def choose(query: str | None, cookie: str | None, accept_language: str | None) -> str:
    """The locale of a request: the switch's choice, the remembered one, the browser's, English."""
    for choice in (query, cookie):
        if choice in LOCALES:
            return str(choice)
    return negotiate(accept_language)


def current_locale() -> str:
    """The locale of the request being answered (English outside one)."""
    return _locale.get()


def use_locale(locale: str, here: str | None = None) -> None:
    """Set the locale (and the switch's address) of the request being answered."""
    _locale.set(locale if locale in LOCALES else DEFAULT_LOCALE)
    _here.set(here)


def not_this_address() -> None:
    """The switch leads elsewhere than this page's address (an error page: what was refused is not repeated)."""
    _here.set(None)


def page_address() -> str | None:
    """This page's own address (path and query) when a GET asked for it, else None."""
    return _here.get()


@dataclass(frozen=True)
class LanguageLink:
    """One entry of the language switch."""

    locale: str
    name: str
    href: str
    current: bool


def switch_links(fallback: str, prefix: str = "") -> list[LanguageLink]:
    """The language switch: this page (or ``fallback`` when it answered a form) in each locale;
    ``prefix`` is the path a path-prefixing proxy adds in front of this page's own path."""
    here = prefix + _here.get() if _here.get() is not None else fallback
    path, _, query = here.partition("?")
    kept = [(name, value) for name, value in parse_qsl(query, keep_blank_values=True) if name != QUERY_NAME]
    return [LanguageLink(locale, name, f"{path}?{urlencode([*kept, (QUERY_NAME, locale)])}", locale == current_locale())
            for locale, name in LOCALES.items()]


# ----- catalogs ----------------------------------------------------------------------


def catalog_path(locale: str) -> Any:
    """The ``.po`` file of a translated locale (a Traversable inside the package)."""
    return resources.files("connector.i18n").joinpath("locale", CATALOG_DIRS[locale], "LC_MESSAGES", "messages.po")


@lru_cache(maxsize=None)
def translations(locale: str) -> NullTranslations:
    """The gettext translations of ``locale``, compiled from its ``.po`` in memory (once)."""
    if locale not in CATALOG_DIRS:
        return NullTranslations()
    with catalog_path(locale).open("rb") as source:
        catalog = read_po(source, locale=CATALOG_DIRS[locale])
    compiled = BytesIO()
    write_mo(compiled, catalog)  # fuzzy entries are left out, as msgfmt does
    compiled.seek(0)
    return Translations(compiled)


def gettext(message: str, locale: str | None = None) -> str:
    """``message`` in the locale (of the request unless given); itself when not in the catalog."""
    return translations(locale or current_locale()).gettext(message)


def ngettext(singular: str, plural: str, count: int, locale: str | None = None) -> str:
    """The singular or plural message for ``count`` in the locale (``%(num)d`` filled in)."""
    return translations(locale or current_locale()).ngettext(singular, plural, count) % {"num": count}


def translate(message: Any, locale: str | None = None) -> Any:
    """A message made in Python as the person reads it: a `Text` with its parameters, a marked
    string by lookup; anything else (None, data) unchanged."""
    if isinstance(message, Text):
        return gettext(message.msgid, locale) % message.params if message.params else gettext(message.msgid, locale)
    if isinstance(message, str):
        return gettext(message, locale)
    return message


def message_of(exc: BaseException) -> str:
    """The message an exception was raised with, a `Text` kept as such (``str(exc)`` loses it)."""
    first = exc.args[0] if len(exc.args) == 1 else None
    return first if isinstance(first, str) else str(exc)


# ----- dates and numbers ------------------------------------------------------------------


def babel_locale(locale: str | None = None) -> Locale:
    """Babel's locale for one of ours."""
    return Locale.parse(locale or current_locale(), sep="-")


def readable_instant(moment: datetime, locale: str | None = None) -> str:
    """A UTC instant as people of the locale read it: ``1 Mar 2026, 12:00 UTC``, ``2026年3月1日 12:00 UTC``."""
    chosen = babel_locale(locale)
    moment = moment.astimezone(UTC)
    if chosen.language == "en":
        text = format_datetime(moment, "d MMM y, HH:mm", tzinfo=UTC, locale=chosen)
    else:
        # The locale's long date and 24-hour time, joined as its date-time pattern joins them.
        date = format_date(moment.date(), "long", locale=chosen)
        time = format_time(moment, "HH:mm", tzinfo=UTC, locale=chosen)
        text = chosen.datetime_formats["long"].format(time, date).replace("'", "")
    return f"{text} UTC"


def number(value: Any, locale: str | None = None, pattern: str | None = None) -> Any:
    """An int or float with the locale's digit grouping and decimal mark (``pattern``: Babel's,
    e.g. ``0.00``; a number too large for it plainly, ``1e+300``); anything else unchanged."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    try:
        return format_decimal(value, format=pattern, locale=babel_locale(locale))
    except (ArithmeticError, ValueError):
        return f"{value:g}"  # a brain's file may hold 1e300 or inf: beyond what the pattern's rounding takes


_SIZE_UNITS = (("digital-gigabyte", 10**9), ("digital-megabyte", 10**6), ("digital-kilobyte", 10**3))


def size(value: Any, locale: str | None = None) -> Any:
    """A byte count as a size in the locale (``1.2 MB``, ``1.2 MB`` with the locale's marks); else unchanged."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    for unit, scale in _SIZE_UNITS:
        if value >= scale:
            return format_unit(value / scale, unit, length="short", format="#,##0.#", locale=babel_locale(locale))
    # Bytes in their long form: CLDR's short English one is "byte" whatever the count ("903 byte").
    return format_unit(value, "digital-byte", length="long", format="#,##0", locale=babel_locale(locale))


def listing(items: Iterable[Any], locale: str | None = None) -> str:
    """Messages (translated) as a list in the locale's words: ``a, b, and c``, ``a、b和c``."""
    return format_list([str(translate(item, locale)) for item in items], style="standard", locale=babel_locale(locale))


# ----- the middleware ---------------------------------------------------------------------


def _cookie(raw: str, name: str) -> str | None:
    for part in raw.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value.strip()
    return None


def _header(scope: Mapping[str, Any], name: bytes) -> str | None:
    values = [value for key, value in scope.get("headers", []) if key.lower() == name]
    return b",".join(values).decode("latin-1") if values else None


def _is_page(scope: dict[str, Any], path: str) -> bool:
    """A request for a page people read: the app, the sign-in pages, the connector's ``/``, and
    an MCP URL a browser opened (GET asking for HTML: connector/webapp/landing.py)."""
    if path.startswith(STATIC_PREFIX):
        return False
    if path == "/" or path.startswith(PAGE_PREFIXES):
        return True
    browser = scope.get("method") == "GET" and "text/html" in (_header(scope, b"accept") or "").lower()
    return browser and (path == "/mcp" or path.startswith("/mcp/brains/"))


class LocaleMiddleware:
    """ASGI middleware: each page request gets its locale (`current_locale`); a ``lang`` choice
    is remembered in a cookie for every page of the connector (path ``/``, ``SameSite=Lax``, so it
    also holds on the OAuth sign-in page an app opens); pages say they vary with it."""

    def __init__(self, app: Callable[..., Any]) -> None:
        """Wrap an ASGI app."""
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        """Choose the locale, then answer; adds the cookie and ``Vary`` to the answer."""
        path = str(scope.get("path", ""))
        if scope.get("type") != "http" or not _is_page(scope, path):
            await self.app(scope, receive, send)
            return
        query = scope.get("query_string", b"").decode("latin-1")
        asked = next((value for name, value in parse_qsl(query) if name == QUERY_NAME), None)
        remembered = _cookie(_header(scope, b"cookie") or "", COOKIE_NAME)
        locale = choose(asked, remembered, _header(scope, b"accept-language"))
        # The path as sent (percent-encoded): a decoded "%3F" in a memory id would end the path early.
        raw = scope.get("raw_path")
        # (Some servers and test clients put the query in raw_path too: only the path is kept.)
        sent = raw.decode("latin-1").partition("?")[0] if isinstance(raw, bytes) and raw.startswith(b"/") else path
        here = sent + (f"?{query}" if query else "")
        use_locale(locale, here if scope.get("method") in ("GET", "HEAD") else None)
        remember = asked in LOCALES and asked != remembered
        secure = scope.get("scheme") == "https" or (_header(scope, b"x-forwarded-proto") or "") == "https"

        async def send_with_language(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                headers = list(message.get("headers", []))
                if remember:
                    cookie = f"{COOKIE_NAME}={locale}; Path=/; Max-Age={COOKIE_AGE_S}; SameSite=Lax"
                    headers.append((b"set-cookie", (cookie + ("; Secure" if secure else "")).encode("latin-1")))
                headers.append((b"vary", b"Accept-Language, Cookie"))
                headers.append((b"content-language", locale.encode("ascii")))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_language)
