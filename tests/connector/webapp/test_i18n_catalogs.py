"""The catalogs: every message of the pages (templates and Python) is translated in each locale,
with the same placeholders, and the catalogs the app compiles at start-up are the ``.po`` files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.pofile import read_po

from connector.i18n import CATALOG_DIRS, LOCALES, catalog_path, gettext, ngettext, translations

ROOT = Path(__file__).resolve().parents[3]
KEYWORDS = {"_": None, "gettext": None, "ngettext": (1, 2), "N_": None, "Text": None}
PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]|%%")
TAG = re.compile(r"</?[a-z]+[^>]*>")


def extracted() -> dict[str | tuple[str, ...], str]:
    """Every message the pages use, as `make messages` extracts it (babel.cfg), with where it is."""
    with (ROOT / "babel.cfg").open(encoding="utf-8") as config:
        method_map, options_map = parse_mapping_cfg(config)
    found: dict[str | tuple[str, ...], str] = {}
    for filename, _line, message, _comments, _context in extract_from_dir(
            str(ROOT), method_map, options_map, keywords=KEYWORDS, strip_comment_tags=True):
        key = tuple(message) if isinstance(message, (list, tuple)) else message
        if isinstance(key, tuple):
            key = tuple(part for part in key if part)  # N_/Text take one message (extra arguments are not)
            key = key[0] if len(key) == 1 else key
        found.setdefault(key, filename)
    return found


MESSAGES = extracted()


def catalog(locale: str):  # noqa: ANN201 - babel's Catalog
    with catalog_path(locale).open("rb") as source:
        return read_po(source, locale=CATALOG_DIRS[locale])


def test_extraction_finds_the_pages_messages() -> None:
    # Templates, routes, actions, the importers, views, the OAuth page and its server: all found.
    files = set(MESSAGES.values())
    for expected in ("templates/home.html", "templates/base.html", "webapp/routes.py", "webapp/actions.py",
                     "imports/plan.py", "imports/markdown.py", "webapp/views.py", "web/page.py", "oauth/server.py"):
        assert any(name.replace("\\", "/").endswith(expected) for name in files), expected
    assert "Sign in to your brain" in MESSAGES and "Pinned." in MESSAGES and "Connect your brain" in MESSAGES
    assert ("%(count)s pair waiting.", "%(count)s pairs waiting.") in MESSAGES
    assert len(MESSAGES) > 250


@pytest.mark.parametrize("locale", sorted(CATALOG_DIRS))
def test_every_message_is_translated_with_the_same_placeholders(locale: str) -> None:
    entries = {(tuple(m.id) if isinstance(m.id, (list, tuple)) else m.id): m for m in catalog(locale) if m.id}
    missing = [key for key in MESSAGES if key not in entries]
    assert missing == [], f"{locale}: not in the catalog (run `make messages` and translate): {missing[:5]}"
    problems = []
    for key in MESSAGES:
        entry = entries[key]
        texts = entry.string if isinstance(entry.string, (list, tuple)) else (entry.string,)
        if entry.fuzzy or not all(texts):
            problems.append(f"untranslated or fuzzy: {key!r}")
            continue
        source = key if isinstance(key, str) else key[-1]
        for text in texts:
            if sorted(PLACEHOLDER.findall(text)) != sorted(PLACEHOLDER.findall(source)):
                problems.append(f"placeholders differ: {key!r} -> {text!r}")
            if sorted(TAG.findall(text)) != sorted(TAG.findall(source)):
                problems.append(f"markup differs: {key!r} -> {text!r}")
            if text == source and re.search(r"[A-Za-z]{3}", re.sub(PLACEHOLDER, "", text)):
                problems.append(f"left in English: {key!r}")
    assert problems == []


@pytest.mark.parametrize("locale", sorted(CATALOG_DIRS))
def test_the_app_compiles_the_po_files_at_start(locale: str) -> None:
    # No build step: what the app serves is exactly what the .po says.
    compiled = translations(locale)
    for entry in catalog(locale):
        if not entry.id or entry.fuzzy:
            continue
        if isinstance(entry.id, (list, tuple)):
            assert compiled.ngettext(entry.id[0], entry.id[1], 1) == entry.string[0]
        else:
            assert compiled.gettext(entry.id) == entry.string


def test_every_translated_message_formats_with_its_parameters() -> None:
    # A translation with a broken placeholder would raise when shown: format each one.
    for locale in CATALOG_DIRS:
        for entry in catalog(locale):
            if not entry.id:
                continue
            source = entry.id if isinstance(entry.id, str) else entry.id[0]
            names = {name for name in PLACEHOLDER.findall(source) if name}
            values = {name: 1 for name in names}
            if isinstance(entry.id, (list, tuple)):
                for text in entry.string:
                    assert text % values  # raises on a bad placeholder
            elif names or "%%" in source:
                assert gettext(entry.id, locale) % values
    assert ngettext("%(num)d attempt left.", "%(num)d attempts left.", 2, "ja") == "残り 2 回試行できます。"


def test_locales_and_english_fallback() -> None:
    assert list(LOCALES) == ["en", "zh-Hans", "ja"]
    assert gettext("Pinned.", "en") == "Pinned." and gettext("Pinned.", "ja") == "ピン留めしました。"
    assert gettext("Pinned.", "zh-Hans") == "已置顶。"
    assert gettext("a message no catalog has", "ja") == "a message no catalog has"
