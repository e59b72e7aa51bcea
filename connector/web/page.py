"""Render the sign-in page and the headers that keep it safe.

The page loads nothing from anywhere: its CSS is inlined and allowed by hash in
a strict Content-Security-Policy, scripts are not allowed at all, it cannot be
framed, cached or leak a referrer. Every value shown is HTML-escaped.
"""

from __future__ import annotations

import base64
import hashlib
import re
from functools import lru_cache
from html import escape
from importlib import resources
from string import Template

from connector.identity.dev import DEV_WARNING
from connector.oauth.server import SCOPE_DESCRIPTIONS, SignInView
from connector.webapp.i18n import QUERY_NAME, current_locale, ngettext, page_address, switch_links, translate
from connector.webapp.i18n import gettext as _

# A CSP source we are willing to add for the redirect after the form (scheme://host[:port]).
_ORIGIN_RE = re.compile(r"^https?://[A-Za-z0-9.\-]+(?::[0-9]{1,5})?$|^https?://\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?$")


@lru_cache(maxsize=1)
def _assets() -> tuple[Template, str, str]:
    folder = resources.files("connector.web")
    template = Template(folder.joinpath("signin.html").read_text(encoding="utf-8"))
    # The web app's font stacks (CJK per language) first, inlined like the rest: the page loads nothing.
    fonts = resources.files("connector.webapp").joinpath("static", "fonts.css").read_text(encoding="utf-8")
    css = fonts + folder.joinpath("signin.css").read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode("ascii")
    return template, css, f"'sha256-{digest}'"


def page_headers(redirect_origin: str | None) -> dict[str, str]:
    """Security headers for the page; the form may post here and then redirect to the client."""
    _, _, style_hash = _assets()
    form_action = "'self'"
    if redirect_origin and _ORIGIN_RE.match(redirect_origin):
        # Browsers apply form-action to the redirect that follows the POST as well.
        form_action += " " + redirect_origin
    csp = (
        f"default-src 'none'; style-src {style_hash}; img-src 'none'; script-src 'none'; "
        f"form-action {form_action}; frame-ancestors 'none'; base-uri 'none'"
    )
    return {
        "Content-Security-Policy": csp,
        "X-Frame-Options": "DENY",
        "Cache-Control": "no-store",
        "Pragma": "no-cache",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "Cross-Origin-Opener-Policy": "same-origin",
    }


CURRENT = ' aria-current="true"'


def _language_switch(view: SignInView) -> str:
    """The page in each language: links to this page with the choice in their address (kept in
    a cookie); a page answering a post gets a form posting this sign-in again instead."""
    label = escape(_("Language"))
    if page_address() is not None:
        links = "".join(f'<li><a href="{escape(link.href)}" lang="{escape(link.locale)}" hreflang="{escape(link.locale)}"'
                        f'{CURRENT if link.current else ""}>{escape(link.name)}</a></li>'
                        for link in switch_links(view.form_action, view.form_action.removesuffix("/authorize/complete")))
        return f'<nav class="languages" aria-label="{label}"><ul>{links}</ul></nav>\n'
    buttons = "".join(
        f'<button type="submit" class="language" name="action" value="language" lang="{escape(link.locale)}" '
        f'formaction="{escape(view.form_action)}?{QUERY_NAME}={escape(link.locale)}"'
        f'{CURRENT if link.current else ""}>{escape(link.name)}</button>'
        for link in switch_links(view.form_action))
    login = f'<input type="hidden" name="login_id" value="{escape(view.login_id)}">' if view.login_id else ""
    return (f'<form method="post" class="languages" aria-label="{label}" action="{escape(view.form_action)}">'
            f"{login}{buttons}</form>\n")


def render_signin(view: SignInView, *, dev: bool = False) -> str:
    """The HTML of the sign-in page (or of an error page when ``view.login_id`` is None), in the
    request's language."""
    template, css, _style = _assets()
    warning = escape(_(DEV_WARNING))
    dev_banner = f'<p class="dev" role="alert">{warning}</p>\n' if dev or view.provider == "dev" else ""
    parts: list[str] = []
    if view.login_id is None:
        title = _("Sign-in not possible")
        problem = translate(view.error) or _("Something went wrong.")
        parts.append(f'<p class="error" role="alert">{escape(problem)}</p>')
    else:
        title = _("Connect your brain")
        client = f"<strong>{escape(view.client_name)}</strong>"
        if view.brain:
            parts.append("<p>" + _("%(client)s asks to use your brain %(brain)s (only this brain) and to:") % {
                "client": client, "brain": f'<strong class="brain">{escape(view.brain)}</strong>'} + "</p>")
        else:
            parts.append("<p>" + _("%(client)s asks to use your brain and to:") % {"client": client} + "</p>")
        parts.append("<ul>" + "".join(f"<li>{escape(_(SCOPE_DESCRIPTIONS[s]) if s in SCOPE_DESCRIPTIONS else s)}</li>"
                                      for s in view.scopes) + "</ul>")
        parts.append('<p class="muted">' + escape(_("The app names itself; it will be sent back to %(host)s. Client id: %(client_id)s")
                                                  % {"host": view.redirect_host, "client_id": view.client_id}) + "</p>")
        if view.error:
            left = ""
            if view.provider == "static":
                left = " " + ngettext("%(num)d attempt left.", "%(num)d attempts left.", view.attempts_left)
            parts.append(f'<p class="error" role="alert">{escape(translate(view.error))}{escape(left)}</p>')
        parts.append(f'<form method="post" action="{escape(view.form_action)}" autocomplete="off">')
        parts.append(f'<input type="hidden" name="login_id" value="{escape(view.login_id)}">')
        if view.provider == "static":
            parts.append('<label for="token">' + escape(_("Your store token")) + "</label>")
            parts.append('<input type="password" id="token" name="token" placeholder="bst_..." required '
                         'autocomplete="off" autocapitalize="off" spellcheck="false" autofocus>')
            parts.append('<p class="muted">' + escape(_("It is checked with your brain store and never shown to the app.")) + "</p>")
            allow = _("Sign in")
        else:
            allow = _("Continue as the local development user")
        parts.append('<div class="buttons">')
        parts.append(f'<button class="primary" type="submit" name="action" value="allow">{escape(allow)}</button>')
        parts.append('<button class="secondary" type="submit" name="action" value="deny" formnovalidate>' + escape(_("Cancel")) + "</button>")
        parts.append("</div></form>")
    return template.substitute(lang=current_locale(), title=escape(title), css=css, dev_banner=dev_banner,
                               languages=_language_switch(view), body="\n".join(parts) + "\n")
