"""The pages' language over HTTP against a real store: Accept-Language, the switch's cookie,
``<html lang>``, translated messages made in Python, localised dates, the OAuth sign-in page."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from connector.i18n import COOKIE_NAME, negotiate, preferences, size, supported

from ..conftest import RunningStore, shared_store
from tests.connector.oauth.live import running_connector

from .conftest import BASE, app_client, at_store, csrf_of, sign_in, signed_in_browser
from .test_webapp_browser import _write_through_mcp

# Every test here makes its own users and looks only at their brains: one store for the module.
store = pytest.fixture(shared_store, name="store")

pytestmark = pytest.mark.timeout(120)


def _lang(html: str) -> str:
    match = re.search(r'<html lang="([^"]+)">', html)
    assert match, html[:200]
    return match.group(1)


@pytest.mark.parametrize(("header", "locale"), [
    ("zh", "zh-Hans"), ("zh-CN", "zh-Hans"), ("zh-SG", "zh-Hans"), ("zh-Hans", "zh-Hans"), ("zh-Hans-CN", "zh-Hans"),
    ("zh-TW", "en"), ("zh-Hant", "en"), ("zh-HK", "en"), ("ja-JP", "ja"), ("ja", "ja"), ("en-GB", "en"),
    ("fr-FR, ja;q=0.5, en;q=0.4", "ja"), ("zh-TW, zh-CN;q=0.8", "zh-Hans"), ("de, en;q=0.9, ja;q=0.8", "en"),
    ("ja;q=0, zh;q=0.1", "zh-Hans"), ("*", "en"), ("", "en"), ("x" * 5000, "en"), ("ja;q=abc", "en"), (";;,,", "en"),
])
def test_accept_language_is_negotiated_with_babel(header: str, locale: str) -> None:
    assert negotiate(header) == locale


@pytest.mark.parametrize(("value", "locale", "shown"), [
    (0, "en", "0 bytes"), (1, "en", "1 byte"), (903, "en", "903 bytes"), (2400, "en", "2.4 kB"),
    (903, "zh-Hans", "903字节"), (903, "ja", "903 バイト"), (3_100_000, "ja", "3.1 MB"),
])
def test_sizes_read_as_words_of_the_locale(value: int, locale: str, shown: str) -> None:
    """The Brains page's sizes: an empty or small brain read "0 byte", "903 byte" in English."""
    assert size(value, locale) == shown


def test_preferences_follow_quality_then_order() -> None:
    assert preferences("a;q=0.5, b, c;q=0.9, d;q=0") == ["b", "c", "a"]
    assert supported("klingon-XX") is None and supported(None) is None


def test_accept_language_picks_the_pages_language(store: RunningStore) -> None:
    with app_client(store.url) as client:
        for header, locale, words in (("ja-JP,ja;q=0.9", "ja", "ブレインにサインイン"),
                                      ("zh-CN,zh;q=0.9", "zh-Hans", "登录你的大脑"),
                                      ("de-DE", "en", "Sign in to your brain"),
                                      ("zh-TW", "en", "Sign in to your brain")):
            page = client.get("/app/signin", headers={"Accept-Language": header})
            assert page.status_code == 200
            assert _lang(page.text) == locale and words in page.text
            assert page.headers["content-language"] == locale
            assert "Accept-Language" in page.headers["vary"] and "Cookie" in page.headers["vary"]
            # Only a choice made with the switch is remembered; the browser's wish is asked anew.
            assert COOKIE_NAME not in page.headers.get("set-cookie", "")
        assert _lang(client.get("/app/signin").text) == "en"  # no header: English


def test_the_switch_cookie_wins_and_sticks_across_the_app(store: RunningStore) -> None:
    alice = store.add_user("alice")
    with app_client(store.url) as client:
        page = client.get("/app/signin", headers={"Accept-Language": "en"})
        # The switch is on the sign-in page: one link per language, each to this page.
        links = dict(re.findall(r'<a href="([^"]+)" lang="([^"]+)" hreflang', page.text))
        assert sorted(links.values()) == ["en", "ja", "zh-Hans"]
        ja = next(href for href, locale in links.items() if locale == "ja")
        assert ja.startswith("/app/signin?") and "lang=ja" in ja
        chosen = client.get(ja.replace("&amp;", "&"), headers={"Accept-Language": "zh-CN"})
        assert _lang(chosen.text) == "ja" and "ブレインにサインイン" in chosen.text
        cookie = next(h for h in chosen.headers.get_list("set-cookie") if h.startswith(f"{COOKIE_NAME}="))
        lowered = cookie.lower()
        assert f"{COOKIE_NAME}=ja" in cookie and "samesite=lax" in lowered and "path=/;" in lowered + ";"
        # The cookie beats the browser's language on every later page, signed in too.
        csrf = sign_in(client, alice.token)
        home = client.get("/app", headers={"Accept-Language": "zh-CN"})
        assert _lang(home.text) == "ja" and "あなたのブレイン" in home.text and "サインアウト" in home.text
        # ... and on the OAuth sign-in page an app opens (the cookie's path is /).
        assert client.cookies.get(COOKIE_NAME) == "ja"
        # A message made in Python (a flash after a write) is in the chosen language too.
        new = client.post("/app/new", data={"csrf": csrf, "title": "Tea", "content": "I prefer green tea.",
                                            "type": "preference", "tags": ""})
        assert new.status_code == 303
        shown = client.get(new.headers["location"])
        assert "保存しました。" in shown.text and "Saved." not in shown.text
        # The memory's content is never translated; its dates are in the locale, exact in <time>.
        assert "I prefer green tea." in shown.text
        assert re.search(r'<time datetime="\d{4}-\d\d-\d\dT[^"]+Z" title="[^"]+">\d{4}年\d{1,2}月\d{1,2}日 \d\d:\d\d UTC</time>',
                         shown.text), shown.text
        # Switching back to English: the cookie follows.
        back = client.get("/app?lang=en")
        assert _lang(back.text) == "en" and "Your brain" in back.text
        assert client.get("/app", headers={"Accept-Language": "ja"}).text.count('<html lang="en">') == 1


def test_unknown_language_choice_falls_back_without_a_cookie(store: RunningStore) -> None:
    with app_client(store.url) as client:
        page = client.get("/app/signin?lang=tlh", headers={"Accept-Language": "ja"})
        assert page.status_code == 200 and _lang(page.text) == "ja"
        assert COOKIE_NAME not in page.headers.get("set-cookie", "")
        page = client.get("/app/signin?lang=%3Cscript%3E")
        assert _lang(page.text) == "en" and "<script" not in page.text


def test_python_messages_are_translated_on_error_pages(store: RunningStore) -> None:
    alice = store.add_user("alice")
    with app_client(store.url) as client:
        client.cookies.set(COOKIE_NAME, "zh-Hans")
        page = client.get("/app/signin")
        refused = client.post("/app/signin", data={"csrf": csrf_of(page.text), "token": "bst_wrong", "access": "write"})
        assert refused.status_code == 401
        assert "你的大脑存储服务未接受该令牌。" in refused.text and "That token was not accepted" not in refused.text
        csrf = sign_in(client, alice.token)
        missing = client.get("/app/memory/mem_20990101_000000_zzzzzz")
        assert missing.status_code == 404 and "没有这条记忆" in missing.text
        # An upload that is not JSON: the reason, made in Python with parameters, in Chinese.
        bad = client.post("/app/import", data={"csrf": csrf}, files={"file": ("x.json", b"{not json", "application/json")})
        assert bad.status_code == 400 and "<bdi>x.json</bdi>，第 1 行：不是 JSON" in bad.text
        unknown = client.get("/app/search?query=tea&mode=fuzzy")
        assert unknown.status_code == 400 and "未知的回想模式" in unknown.text and "混合" in unknown.text


def _authorize_query(client: Any) -> str:
    """A registered public client's /authorize query (PKCE S256)."""
    registered = client.post("/register", json={"client_name": "Test app", "redirect_uris": ["http://127.0.0.1:9/cb"],
                                                "token_endpoint_auth_method": "none"})
    assert registered.status_code in (200, 201), registered.text
    client_id = registered.json()["client_id"]
    challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    return (f"/authorize?response_type=code&client_id={client_id}&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcb"
            f"&code_challenge={challenge}&code_challenge_method=S256&state=s1&scope=brain.read%20brain.write&resource=" + quote(f"{BASE}/mcp", safe=""))


def test_the_oauth_sign_in_page_speaks_the_chosen_language(store: RunningStore) -> None:
    with app_client(store.url) as client:
        query = _authorize_query(client)
        page = client.get(query, headers={"Accept-Language": "ja", "Accept": "text/html"})
        assert page.status_code == 200, page.headers.get("location")
        assert _lang(page.text) == "ja" and "ブレインを接続" in page.text and "記憶の読み取り" in page.text
        assert "Connect your brain" not in page.text and "Your store token" not in page.text
        assert "Test app" in page.text  # what the app calls itself is data, never translated
        # The switch on the OAuth page: links to this very request in each language.
        zh = re.search(r'<a href="([^"]+)" lang="zh-Hans"', page.text)
        assert zh and zh.group(1).startswith("/authorize?") and "lang=zh-Hans" in zh.group(1)
        chinese = client.get(zh.group(1).replace("&amp;", "&"), headers={"Accept": "text/html"})
        assert _lang(chinese.text) == "zh-Hans" and "连接你的大脑" in chinese.text
        assert client.cookies.get(COOKIE_NAME) == "zh-Hans"
        # A wrong token: the page answers a post; its switch posts the sign-in again, nothing counted.
        login_id = re.search(r'name="login_id" value="([^"]+)"', chinese.text).group(1)
        wrong = client.post("/authorize/complete", data={"login_id": login_id, "action": "allow", "token": "bst_nope"})
        assert wrong.status_code == 401 and "存储服务未接受该令牌。" in wrong.text and "还剩 2 次尝试。" in wrong.text
        assert 'formaction="/authorize/complete?lang=ja"' in wrong.text
        again = client.post("/authorize/complete?lang=ja", data={"login_id": login_id, "action": "language"})
        assert again.status_code == 200 and _lang(again.text) == "ja" and "ブレインを接続" in again.text
        assert "残り" not in again.text and client.cookies.get(COOKIE_NAME) == "ja"
        # The cookie chosen on the OAuth page holds in the web app as well.
        assert _lang(client.get("/app/signin", headers={"Accept-Language": "en"}).text) == "ja"
        # A refused request shown to a browser: the reason's frame is translated.
        refused = client.get("/authorize?response_type=code&client_id=nope", headers={"Accept": "text/html"})
        assert refused.status_code >= 400 and "无法开始此次登录" not in refused.text
        assert "このサインインは開始できません" in refused.text


def test_fonts_render_cjk_and_prefer_each_languages_glyphs(store: RunningStore) -> None:
    with app_client(store.url) as client:
        page = client.get("/app/signin")
        assert re.search(r'<link rel="stylesheet" href="/app/static/fonts.css\?v=\w+">', page.text)
        fonts = client.get("/app/static/fonts.css")
        assert fonts.status_code == 200 and fonts.headers["content-type"].startswith("text/css")
        css = fonts.text
        # Japanese and simplified Chinese each name their own fonts first (Han glyphs differ), for
        # macOS/iOS, Windows, Linux and Android.
        ja = css[css.index(":lang(ja)"):].split("}")[0]
        zh = css[css.index(":lang(zh-Hans)"):].split("}")[0]
        assert ja.index("Hiragino Sans") < ja.index("Noto Sans CJK JP") and "Yu Gothic" in ja and "SC" not in ja
        assert zh.index("PingFang SC") < zh.index("Noto Sans CJK SC") and "Microsoft YaHei" in zh and "JP" not in zh
        # The OAuth sign-in page loads nothing: the same fonts are inlined, allowed by their hash.
        query = _authorize_query(client)
        oauth = client.get(query, headers={"Accept": "text/html"})
        assert ":lang(ja)" in oauth.text and "Noto Sans CJK SC" in oauth.text
        assert "style-src 'sha256-" in oauth.headers["content-security-policy"]


def test_the_switch_keeps_a_proxy_path_prefix_and_static_files_do_not_vary(store: RunningStore) -> None:
    with app_client(store.url, public_url="http://127.0.0.1:8788/brain") as client:
        page = client.get("/app/signin?x=1")
        hrefs = re.findall(r'<a href="([^"]+)" lang="[^"]+" hreflang', page.text)
        assert hrefs and all(href.startswith("/brain/app/signin?x=1&amp;lang=") for href in hrefs), hrefs
        css = client.get("/app/static/app.css")
        assert "vary" not in css.headers and "content-language" not in css.headers


def test_the_home_pages_word_on_the_account_is_in_the_pages_language(store: RunningStore) -> None:
    alice = store.add_user("alice")
    made = httpx.post(f"{store.url}/api/brains", headers={"Authorization": f"Bearer {alice.token}"},
                      json={"name": "team notes"}, timeout=30)
    assert made.status_code in (200, 201), made.text
    with app_client(store.url) as client:
        client.cookies.set(COOKIE_NAME, "ja")
        sign_in(client, alice.token)
        home = client.get("/app")
        assert home.status_code == 200 and _lang(home.text) == "ja"
        assert "このアカウントにはブレインが 2 個あります" in home.text
        # The tools' English note for the model is not what the page shows.
        assert "brains; serving" not in home.text and "Use brain_use" not in home.text


def test_tags_typed_with_chinese_or_japanese_commas_are_separate_tags(store: RunningStore) -> None:
    # A Chinese keyboard types ， and a Japanese one 、 for a comma: "部署，支付" was one tag.
    user = store.add_user("tags-cjk")
    with app_client(store.url) as client:
        client.get("/app/signin?lang=ja")
        csrf = sign_in(client, user.token)
        new = client.post("/app/new", data={"csrf": csrf, "title": "会議室の予約", "content": "前日までに予約する。",
                                            "type": "learning", "tags": "会議、予約，部署, 支付､会議"})
        assert new.status_code == 303, new.text
        assert at_store(store, user.token)["会議室の予約"]["tags"] == ["会議", "予約", "部署", "支付"]
        memory_id = new.headers["location"].split("/app/memory/")[1].split("?")[0]
        edited = client.post(f"/app/memory/{memory_id}/edit", data={
            "csrf": csrf, "title": "会議室の予約", "content": "前日までに予約する。", "type": "learning",
            "tags": "会議室，ルール"})
        assert edited.status_code == 303, edited.text
        assert at_store(store, user.token)["会議室の予約"]["tags"] == ["会議室", "ルール"]


def test_why_a_memory_waits_for_verification_is_said_in_words_of_the_locale(store: RunningStore, tmp_path: Path) -> None:
    # The page showed the brain's codes ("origin:external"), in every language.
    alice = store.add_user("held-reasons")
    with running_connector(tmp_path, store.url, state_dir=tmp_path / "state") as server:
        ids = asyncio.run(_write_through_mcp(server.base_url + "/mcp", alice.token))
        browser = signed_in_browser(server.base_url, alice.token, "198.51.100.30")
        for locale, words in (("ja", "外部の情報源から来ている"), ("zh-Hans", "来自外部来源"),
                              ("en", "it comes from an outside source")):
            page = browser.get(f"/app/memory/{ids['held']}?lang={locale}").text
            assert words in page and "origin:external" not in page, (locale, page)
        browser.close()
