"""Which writes are held for verification (quarantine), and why.

A write is held when its origin is low-trust, or when a non-user write reads like
instructions aimed at a future agent rather than a fact. Injection patterns count for
every non-user origin; the weaker "suspect" patterns only for low-trust origins and
never for preferences or procedural memories, which legitimately say "always ...".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from connector.engine.format.rules import LOW_TRUST_ORIGINS

_FLAGS = re.IGNORECASE | re.MULTILINE

# Secrets and sending them somewhere, in Chinese and Japanese (their words run together: no \b).
# As the English rule needs "to/at/into/via", the verb names where to, and a secret named before
# it must be what is sent (把 X 发送到, X を…に送信): "密码重置邮件已发送", "密码重置邮件会发送到
# 用户的邮箱" (the reset mail is sent), "パスワード漏洩の対応" (a leak handled) are ordinary notes.
_CJK_SECRET = r"(?:密钥|秘钥|密码|口令|令牌|凭证|凭据|私钥|秘密鍵|パスワード|API\s*キー|アクセスキー|トークン|認証情報|クレデンシャル)"
_ZH_SEND = r"(?:发送|发|上传|转发|泄露|粘贴|提交)(?:到|给|至)"
_JA_SEND = r"[にへ](?:送信|送って|送る|送れ|アップロード|転送|貼り付け|漏ら)"
# "Forget / ignore" that is not "do not forget / do not ignore" (不要忘记, 忘れないで, 忘れずに).
_ZH_IGNORE = r"(?<!不要)(?<!不能)(?<!别)(?<!勿)(?<!没)(?:忽略|无视|忽视|忘记|忘掉|不要理会|不要遵守|抛开)"
_JA_IGNORE = r"(?:無視(?!しない|せず|しちゃ|しては|してはいけ)|忘れ(?!ない|ず|ませ|ちゃ|ては))"

# Injection patterns: checked for every non-user write.
INJECTION_RULES: dict[str, re.Pattern[str]] = {
    "ignore-instructions": re.compile(
        r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+|the\s+|your\s+)*"
        r"(?:previous|prior|earlier|above|preceding|system)\s+(?:instructions|prompts?|rules|directions)"
        # Chinese (忽略之前的所有指令) and Japanese (これまでの指示はすべて無視して): the same request.
        rf"|{_ZH_IGNORE}掉?\s*你?(?:之前|以前|先前|此前|上面|上述|前面|所有|全部|一切|系统)"
        r"[^\n。]{0,12}?(?:指令|指示|提示词?|规则|命令)"
        r"|(?:以前|これまで|今まで|先ほど|上記|すべて|全て|システム)[^\n。]{0,12}?(?:指示|命令|ルール|プロンプト|指令)"
        rf"(?:を|は|も)?\s*(?:すべて|全て)?\s*{_JA_IGNORE}",
        _FLAGS,
    ),
    "pipe-to-shell": re.compile(
        r"\b(?:curl|wget|fetch|iwr|invoke-webrequest)\b[^\n|]*\|\s*(?:sudo\s+)?(?:ba|z|k|da)?sh\b"
        r"|\b(?:curl|wget)\b[^\n|]*\|\s*(?:sudo\s+)?(?:python3?|perl|ruby|node|iex)\b",
        _FLAGS,
    ),
    "exfiltrate-secrets": re.compile(
        r"\b(?:send|post|upload|forward|email|exfiltrate|transmit|leak|share|paste)\b[^\n]{0,80}?"
        r"\b(?:secrets?|api[\s_-]?keys?|keys|tokens?|passwords?|credentials?|private\s+keys?|ssh\s+keys?|\.env)\b"
        r"[^\n]{0,80}?\b(?:to|at|into|via)\b"
        # Chinese and Japanese: 发送给我…密码, 把密钥发送到…, APIキーを…に送信.
        rf"|{_ZH_SEND}[^\n。]{{0,40}}?{_CJK_SECRET}|把[^\n。]{{0,20}}?{_CJK_SECRET}[^\n。]{{0,20}}?{_ZH_SEND}"
        rf"|{_CJK_SECRET}\s*を[^\n。]{{0,40}}?{_JA_SEND}",
        _FLAGS,
    ),
}

# Suspect patterns: only for low-trust origins, not for preferences or procedures.
SUSPECT_RULES: dict[str, re.Pattern[str]] = {
    "imperative-line": re.compile(
        r"^\s*(?:always|never|you\s+must|do\s+not|don't|from\s+now\s+on|remember\s+to)\b"
        r"|^\s*(?:总是|始终|永远|你必须|必须|务必|不要(?!紧)|不许|从现在开始|从今以后|记得|记住"
        r"|常に|必ず|絶対に|決して|今後は|これからは|忘れずに)", _FLAGS
    ),
    "command": re.compile(
        r"^\s*\$\s+\S|\b(?:run|execute|exec)\s+(?:this|the\s+following|`)|"
        r"\b(?:sudo|rm\s+-rf|chmod\s+\+x|bash\s+-c|powershell\s+-)",
        _FLAGS,
    ),
    "imperative-url": re.compile(
        r"\b(?:visit|open|go\s+to|download|fetch|click|navigate\s+to|install\s+from|load)\b[^\n]{0,40}?"
        r"https?://"
        r"|(?:访问|打开|前往|下载|点击|安装|加载)[^\n]{0,40}?https?://"
        # The address is taken possessively and at most 512 characters long: with backtracking,
        # "http://" repeated over a 50,000-character memory took minutes (each start rescanned the rest).
        r"|https?://[\x21-\x7e]{1,512}+[^\n]{0,20}?(?:を開|にアクセス|からダウンロード|をダウンロード|をクリック|からインストール|を読み込)",
        _FLAGS,
    ),
}


def quarantine_mode(config: Any) -> str:
    """``config.json``'s ``quarantine_mode`` (``on`` when absent or unreadable)."""
    if isinstance(config, Mapping):
        mode = config.get("quarantine_mode")
        if isinstance(mode, str) and mode:
            return mode
    return "on"


def quarantine_reasons(
    *, origin: str | None, title: str, content: str, memory_type: str, cognitive_type: str
) -> list[str]:
    """Why a write should be held (empty: it is not).

    ``origin`` None is a write from an older client that names no origin: it is
    treated like ``user`` (never held automatically), as the command line does for
    writes that predate origins.
    """
    if origin is None or origin == "user":
        return []
    reasons: list[str] = []
    if origin in LOW_TRUST_ORIGINS:
        reasons.append(f"origin:{origin}")
    # Read as NFKC: full-width letters (ＡＰＩキー, typed in a Japanese keyboard's full-width mode,
    # or ｃｕｒｌ … | sh to slip past) and half-width katakana (ﾊﾟｽﾜｰﾄﾞ) as the words they show.
    text = unicodedata.normalize("NFKC", f"{title}\n{content}")
    for name, pattern in INJECTION_RULES.items():
        if pattern.search(text):
            reasons.append(f"lint:{name}")
    if origin in LOW_TRUST_ORIGINS and memory_type != "preference" and cognitive_type != "procedural":
        for name, pattern in SUSPECT_RULES.items():
            if pattern.search(text):
                reasons.append(f"lint:{name}")
    return reasons
