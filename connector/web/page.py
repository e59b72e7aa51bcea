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

# A CSP source we are willing to add for the redirect after the form (scheme://host[:port]).
_ORIGIN_RE = re.compile(r"^https?://[A-Za-z0-9.\-]+(?::[0-9]{1,5})?$|^https?://\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?$")


@lru_cache(maxsize=1)
def _assets() -> tuple[Template, str, str]:
    folder = resources.files("connector.web")
    template = Template(folder.joinpath("signin.html").read_text(encoding="utf-8"))
    css = folder.joinpath("signin.css").read_text(encoding="utf-8")
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


def render_signin(view: SignInView, *, dev: bool = False) -> str:
    """The HTML of the sign-in page (or of an error page when ``view.login_id`` is None)."""
    template, css, _ = _assets()
    dev_banner = f'<p class="dev" role="alert">{escape(DEV_WARNING)}</p>\n' if dev or view.provider == "dev" else ""
    parts: list[str] = []
    if view.login_id is None:
        title = "Sign-in not possible"
        parts.append(f'<p class="error" role="alert">{escape(view.error or "Something went wrong.")}</p>')
    else:
        title = "Connect your brain"
        if view.brain:
            parts.append(f"<p><strong>{escape(view.client_name)}</strong> asks to use your brain "
                         f"<strong class=\"brain\">{escape(view.brain)}</strong> (only this brain) and to:</p>")
        else:
            parts.append(f"<p><strong>{escape(view.client_name)}</strong> asks to use your brain and to:</p>")
        parts.append("<ul>" + "".join(f"<li>{escape(SCOPE_DESCRIPTIONS.get(s, s))}</li>" for s in view.scopes) + "</ul>")
        parts.append(f'<p class="muted">The app names itself; it will be sent back to {escape(view.redirect_host)}.'
                     f" Client id: {escape(view.client_id)}</p>")
        if view.error:
            left = f" {view.attempts_left} attempt{'s' if view.attempts_left != 1 else ''} left." if view.provider == "static" else ""
            parts.append(f'<p class="error" role="alert">{escape(view.error)}{left}</p>')
        parts.append(f'<form method="post" action="{escape(view.form_action)}" autocomplete="off">')
        parts.append(f'<input type="hidden" name="login_id" value="{escape(view.login_id)}">')
        if view.provider == "static":
            parts.append('<label for="token">Your store token</label>')
            parts.append('<input type="password" id="token" name="token" placeholder="bst_..." required '
                         'autocomplete="off" autocapitalize="off" spellcheck="false" autofocus>')
            parts.append('<p class="muted">It is checked with your brain store and never shown to the app.</p>')
            allow = "Sign in"
        else:
            allow = "Continue as the local development user"
        parts.append('<div class="buttons">')
        parts.append(f'<button class="primary" type="submit" name="action" value="allow">{escape(allow)}</button>')
        parts.append('<button class="secondary" type="submit" name="action" value="deny" formnovalidate>Cancel</button>')
        parts.append("</div></form>")
    return template.substitute(title=escape(title), css=css, dev_banner=dev_banner, body="\n".join(parts) + "\n")
