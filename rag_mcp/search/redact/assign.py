"""Assignments: a credential's name given a literal value.

``password = "..."``, ``api_key: ...``, ``TOKEN=...``, ``--password=...`` in Python, JS, YAML,
TOML, INI, .env, JSON, shell and command-line syntax. The name must *end* in a credential word
(``db_password``, ``stripeSecretKey``, ``secret_key_base``); the value must be a literal, not a
reference or a template (:mod:`values`). Under non-password names it must also look machine-made
or be a UUID (Heroku and many API keys are UUIDs).
"""

from __future__ import annotations

import re

from rag_mcp.search.redact.values import placeholder, secret_value

Hit = tuple[str, int, int] | None

# keyword -> endings that still name a credential ("pass" + "word"). str.find per keyword is
# several times faster than one regex alternation over the text.
KEYWORDS = {"pass": ("", "word", "wd", "phrase"), "pwd": ("",), "secret": ("",),
            "token": ("",), "key": ("", "base"), "credential": ("", "s")}
_PASSWORD_WORDS = frozenset({"password", "passwd", "passphrase", "pass", "pwd"})
_SECRET_WORDS = frozenset({"secret", "token", "credential", "credentials"})
_KEY_QUALIFIERS = frozenset({"api", "access", "secret", "private", "auth", "encryption", "signing",
                             "master", "client", "app", "account", "license", "subscription",
                             "consumer", "webhook", "shared", "storage", "session", "admin"})
# Lower-case words glued to a keyword that still make a credential name (apikey, dbpassword).
_COMPOUNDS = _KEY_QUALIFIERS | {"db", "bot", "refresh", "user", "root", "smtp", "mail", "id"}
# Words that turn a credential name into something else: flags, limits, ML vocabulary tokens,
# pagination and idempotency tokens (NextToken, ClientRequestToken), public keys.
_NEGATORS = frozenset({"is", "has", "use", "show", "require", "requires", "enable", "enabled",
                       "disable", "validate", "check", "verify", "max", "min", "num", "reset",
                       "forgot", "get", "set", "pad", "bos", "eos", "unk", "sep", "cls", "mask",
                       "special", "boi", "eoi", "start", "end", "image", "audio", "video", "next",
                       "prev", "previous", "page", "pagination", "continuation", "cursor", "sync",
                       "change", "request", "idempotency", "lifecycle", "output", "input",
                       "resume", "verification", "csrf", "xsrf", "public", "marker", "update",
                       "hashed"})
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")  # DB_PASSWORD, stripeSecretKey
_ID_TAIL = re.compile(r"[\w.-]*")
_ASSIGN = re.compile(r"""
    ["'`]?\]?                                         # end of a quoted key or a subscript
    (?:[ \t]*:[ \t]*[A-Za-z_][\w\[\], .|]*?(?=[ \t]*=[^=]))?   # a type annotation before "="
    (?P<pre>[ \t]*)(?P<sep>:=|=>|\?=|=(?![=~])|:(?![:=]))[ \t]*
    (?:[rRbBuU]{0,2}"(?P<d>[^"\\\n]*(?:\\.[^"\\\n]*)*)"
      |[rRbBuU]{0,2}'(?P<s>[^'\\\n]*(?:\\.[^'\\\n]*)*)'
      |`(?P<t>[^`\\\n]*)`
      |(?P<b>[A-Za-z0-9](?:[^\s"'`,;&()\[\]{}<>$%=\\]|&(?![\w.-]+=))*={0,2})  # unquoted
       (?:(?P<eol>[ \t]*(?:\Z|(?=[\n\r#`&\\])))|(?P<tight>(?=[;"']))|(?P<sp>(?=\s))))  # its end
""", re.X)
# Unquoted right-hand sides that read as code, not as a literal: parsed.auth, auth_from_netrc.
_VARIABLE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|[A-Za-z_]+")
_REFINE = tuple((kind, names, re.compile(fmt)) for kind, names, fmt in (  # key name + format
    ("aws_secret_access_key", ("secretaccesskey", "awssecretkey"), r"[A-Za-z0-9/+]{40}"),
    ("aws_session_token", ("sessiontoken", "securitytoken"), r"[A-Za-z0-9/+=]{100,}"),
    ("azure_client_secret", ("azureclientsecret",), r"[\w~.+/=-]{30,44}"),
    ("twilio_auth_token", ("twilioauthtoken", "twiliotoken"), r"[0-9a-f]{32}"),
    ("heroku_api_key", ("herokuapikey", "herokuapitoken", "herokukey"),
     r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"),
    ("mailgun_api_key", ("mailgunapikey", "mailgunkey"), r"[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}")))


_GLUED = ("password", "passwd", "pwd", "secret", "token", "key")


def classify_words(words: list[str]) -> str | None:
    """"password", "generic_secret" or None for a name split into lower-case words."""
    while words and words[-1].isdigit():
        words.pop()
    if words and words[-1] not in _PASSWORD_WORDS | _SECRET_WORDS | {"key", "keybase"}:
        glued = words[-1]  # apikey, accesstoken, dbpassword
        tail = next((t for t in _GLUED if glued.endswith(t) and glued[: -len(t)] in _COMPOUNDS),
                    None)
        if tail:
            words = [*words[:-1], glued[: -len(tail)], tail]
    if not words or any(w in _NEGATORS for w in words):
        return None
    last = words[-1]
    if last in _PASSWORD_WORDS:
        return "password"
    if last in _SECRET_WORDS or (last == "key" and words[-2:-1] and words[-2] in _KEY_QUALIFIERS):
        return "generic_secret"
    if last == "keybase" and words[-2:-1] == ["secret"]:  # Rails' secret_key_base
        return "generic_secret"
    return None


def _key_start(text: str, hit: int) -> int:
    start = hit
    while start and hit - start < 64 and (text[start - 1].isalnum() or text[start - 1] in "_.-"):
        if text[start - 2 : start - 1] == "\\" and text[start - 1] in "nrt":
            break  # "\npassword=..." inside a string literal: the escape is not part of the name
        start -= 1
    return start


def _unquoted_ok(text: str, m: re.Match[str], start: int, end: int) -> bool:
    """An unquoted value must end its line, sit tight in "k=v;" (a connection string), follow
    "--flag=", or be a shell environment prefix (``PGPASSWORD=pw psql ...``); otherwise
    "password = pw2" reads as code and "pass :class:" as prose."""
    if m.group("pre") and m.group("sep") == ":":
        return False
    vs = m.start("b")
    if m.group("eol") is not None or text[start] == "-":
        return True
    if m.group("tight") is not None:
        return not m.group("pre") and text[vs - 1] in "=:"
    env = text[start:end]
    return (m.group("sp") is not None and m.group(0).startswith("=") and env.isupper()
            and (start == 0 or text[start - 1] in " \t\n;&|(`"))


def _echo(value: str, words: list[str]) -> bool:
    """The value only repeats the name (``token: "TOKEN"``, ``api_key: "API-KEY"``)."""
    flat = re.sub(r"[^a-z0-9]", "", value.lower())
    return flat in ("".join(words), words[-1]) if words else False


def judge(text: str, low: str, kw: str, hit: int) -> Hit:
    """Judge one keyword occurrence: is it a credential name assigned a literal secret?"""
    tail = _ID_TAIL.match(text, hit + len(kw), hit + 64)
    end = tail.end() if tail else hit + len(kw)
    last = low[hit:end].rstrip("_.-0123456789")
    if last[len(kw) :].lstrip("_-") not in KEYWORDS[kw]:
        return None  # the name goes on: passwordField, tokenizer
    if kw == "key" and last != "key" and not low[max(0, hit - 7) : hit].rstrip("_-").endswith(
            "secret"):
        return None  # only "secret_key_base" ends in "base"
    start = _key_start(text, hit)
    if start and text[start - 1] == ":":
        return None  # a qualified name: AWS::SecretsManager::Secret, Foo::token
    words = [w.lower() for w in _WORDS.findall(text, start, hit)]
    if hit > start and text[hit - 1].isalpha() and not (
            text[hit - 1].islower() and text[hit].isupper()) and (
            not words or words[-1] not in _COMPOUNDS) and not (
            len(last) > 4 and text[start:end].isupper()):
        return None  # inside a word (bypass, monkey), not at a name boundary (PGPASSWORD)
    name = [*words, last.replace("_", "").replace("-", "")]
    kind = classify_words(name)
    # The window bounds the work per keyword: "password=password=..." stays linear.
    m = _ASSIGN.match(text, end, end + 2048) if kind else None
    if m is None or kind is None:
        return None
    group = next(g for g in "dstb" if m.group(g) is not None)
    value, (vs, ve) = m.group(group), m.span(group)
    if group == "b" and (not _unquoted_ok(text, m, start, end) or _VARIABLE.fullmatch(value)):
        return None
    joined = "".join(name)
    for vendor, names, fmt in _REFINE:
        if any(n in joined for n in names) and fmt.fullmatch(value):
            return None if placeholder(value) else (vendor, vs, ve)
    if _echo(value, name):
        return None
    return (kind, vs, ve) if secret_value(value, password=kind == "password",
                                          uuid_ok=True) else None

