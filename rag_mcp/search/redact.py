"""Mask credentials in text before it leaves the server.

Two detectors feed one list of candidate ranges:

* **Token formats**: vendor secrets with a recognisable shape (prefix, alphabet, length), PEM
  private-key blocks, JWTs, passwords inside URLs and ``Authorization`` values.
* **Assignments**: ``password = "..."``, ``api_key: ...``, ``TOKEN=...`` in Python, JS, YAML,
  TOML, INI, .env, JSON and shell syntax. The key must *end* in a credential word and the value
  must be a literal that is not a placeholder; values under non-password keys must also look
  machine-made (length, letters and digits, Shannon entropy).

Only the secret itself becomes ``[REDACTED:<kind>]``: keys, quotes, URL hosts and surrounding
code stay readable. A marker is never mistaken for a secret (its kind name follows a colon, and
"[" starts no value), so redacting twice changes nothing. Thresholds were set with
``bench/safety/redaction_fp.py`` on millions of lines of real library code.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

MARKER_PREFIX = "[REDACTED:"


@dataclass(frozen=True, slots=True)
class Redaction:
    kind: str
    start: int
    end: int


_Hit = tuple[str, int, int] | None  # (kind, start, end), possibly moved or re-kinded
_Check = Callable[[str, str, int, int], _Hit]  # (text, kind, start, end) -> hit or None
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


def _entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values()) if n else 0.0


# --- checks on token candidates ----------------------------------------------------------------


def _token(text: str, kind: str, s: int, e: int) -> _Hit:
    """The token starts a word and is not a filler (``ghp_xxxx...``) or AWS's documented key."""
    if (s > 0 and text[s - 1] in _ALNUM) or "EXAMPLE" in text[s:e]:
        return None
    return (kind, s, e) if len(set(text[max(s, e - 16) : e])) >= 6 else None


def _varied(text: str, kind: str, s: int, e: int) -> _Hit:
    # hf_ and SK+hex are short prefixes: ask for two character classes, as random output has.
    v = text[max(s, e - 32) : e]
    classes = any(c.isupper() for c in v) + any(c.islower() for c in v) + any(
        c.isdigit() for c in v)
    return _token(text, kind, s, e) if classes >= 2 else None


def _discord(text: str, kind: str, s: int, e: int) -> _Hit:
    # A bot token opens with the bot's numeric user ID in base64, unlike a dotted identifier.
    head = text[s : text.index(".", s)]
    try:
        uid = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))
    except (binascii.Error, ValueError):
        return None
    return _token(text, kind, s, e) if uid.isdigit() and 15 <= len(uid) <= 21 else None


def _telegram(text: str, kind: str, s: int, e: int) -> _Hit:
    # "<bot id>:AA<secret>"; URLs glue it to "/bot", so only more digits disqualify the start.
    j = s
    while j > 0 and s - j < 10 and text[j - 1].isdigit():
        j -= 1
    return None if s - j < 8 or (j > 0 and text[j - 1].isdigit()) else (kind, j, e)


_AZ_HEAD = re.compile(r"[\w~.]{3}\d")


def _azure_ad(text: str, kind: str, s: int, e: int) -> _Hit:
    # Azure AD client secrets look like "abc8Q~...": three characters and a digit before "Q~".
    return _token(text, kind, s - 4, e) if _AZ_HEAD.fullmatch(text, max(0, s - 4), s) else None


def _sas(text: str, kind: str, s: int, e: int) -> _Hit:
    return (kind, s, e) if s >= 5 and text[s - 5] in "?&;" else None


def _bearer(text: str, kind: str, s: int, e: int) -> _Hit:
    v = text[s:e]
    return (kind, s, e) if _looks_random(v) and not _placeholder(v, ()) else None


def _basic(text: str, kind: str, s: int, e: int) -> _Hit:
    if "authorization" not in text[max(0, s - 40) : s].lower():
        return None
    v = text[s:e]
    try:
        _, sep, password = base64.b64decode(v + "=" * (-len(v) % 4)).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return (kind, s, e) if sep and not _placeholder(password, ()) else None


def _url_password(text: str, kind: str, s: int, e: int) -> _Hit:
    return None if _placeholder(text[s:e], ()) else (kind, s, e)


_PEM_END = re.compile(r"-----END (?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----")
_PEM_PIECES = re.compile(r"\\r\\n|\\n|\n")  # real newlines and JSON-escaped ones
_PEM_HEADER = re.compile(r"[A-Z][A-Za-z-]+: \S")  # Proc-Type, DEK-Info, Version, Comment
_B64_RUN = re.compile(r"[A-Za-z0-9+/=]+")
_PEM_JUNK = " \t\r\"'`+,;#*/\\|"  # quotes, concatenation and comment marks around key lines
_GCP_KEY = re.compile(r'"private_key"\s*:\s*"\Z')


def _key_material(chunk: str) -> int:
    """Base64 characters in ``chunk`` if each of its lines is key material, else -1."""
    total = 0
    for piece in _PEM_PIECES.split(chunk):
        piece = piece.strip(_PEM_JUNK)
        if _B64_RUN.fullmatch(piece):
            total += len(piece)
        elif piece and not _PEM_HEADER.match(piece):
            return -1
    return total


def _pem_begin(text: str, kind: str, s: int, e: int) -> _Hit:
    # A header string constant in a PEM parser is not a key: ask for 64+ base64 characters.
    if "EXAMPLE" in text[e : e + 80]:  # AWS's documented example keys
        return None
    if _GCP_KEY.search(text, max(0, s - 40), s):
        kind = "gcp_service_account_key"
    end = _PEM_END.search(text, e, e + 20_000)
    if end and _key_material(text[e : end.start()]) >= 64:
        return kind, s, end.end() + (2 if text.startswith("\\n", end.end()) else 0)
    # The span was cut inside the key: redact the key lines that follow, not the code after.
    pos, material = e, 0
    while pos < len(text):
        nl = text.find("\n", pos + 1)
        nl = len(text) if nl < 0 else nl
        found = _key_material(text[pos:nl])
        if found < 0:
            break
        pos, material = nl, material + found
    return (kind, s, pos) if material >= 64 else None


def _pem_end(text: str, kind: str, s: int, e: int) -> _Hit:
    # An END line with no BEGIN: the span starts inside a key, so redact back to its first line.
    start, material, line_end = s, 0, s
    while line_end > 0:
        line_start = text.rfind("\n", 0, line_end - 1) + 1
        line = text[line_start:line_end]
        found = _key_material(line)
        if found < 0:
            break
        if found:
            start = line_start + len(line) - len(line.lstrip(_PEM_JUNK))
        material, line_end = material + found, line_start
    # A span (or its context lines) may show only the key's last line: base64 right above an
    # END marker is key material however short, while a parser's constant has none above it.
    return (kind, start, e) if material >= 16 else None


# --- token formats -----------------------------------------------------------------------------

_W = r"[\w-]"
# (kind, literal prefixes separated by "|", rest of the pattern, check). The part replaced is
# the group "v" when the pattern has one, else the prefix and the rest.
_RULES: tuple[tuple[str, str, str, _Check], ...] = (
    ("aws_access_key_id", "AKIA|ASIA|ABIA|ACCA", r"[A-Z2-7]{16}(?![A-Za-z0-9])", _token),
    ("aws_access_key_id", "A3T", r"[A-Z0-9][A-Z2-7]{16}(?![A-Za-z0-9])", _token),
    ("aws_session_token", "FwoGZXIvYXdz|IQoJb3JpZ2luX2Vj", r"[A-Za-z0-9+/=]{80,}", _token),
    ("google_api_key", "AIza", rf"{_W}{{35}}(?!{_W})", _token),
    ("google_oauth_client_secret", "GOCSPX-", rf"{_W}{{28}}(?!{_W})", _token),
    ("azure_storage_key", "AccountKey=", r"(?P<v>[A-Za-z0-9+/]{40,100}={0,2})", _token),
    ("azure_shared_access_key", "SharedAccessKey=", r"(?P<v>[A-Za-z0-9+/]{40,100}={0,2})",
     _token),
    ("azure_sas_token", "sig=", r"(?P<v>[A-Za-z0-9%+/]{40,120}(?:%3[dD]|=){0,2})(?![\w%+/=])",
     _sas),
    ("azure_client_secret", "Q~", r"[\w~.-]{31,34}(?![\w~.-])", _azure_ad),
    ("github_pat", "ghp_", r"[A-Za-z0-9]{36}(?![A-Za-z0-9])", _token),
    ("github_pat", "github_pat_", r"[A-Za-z0-9]{22}_[A-Za-z0-9]{59}(?![A-Za-z0-9])", _token),
    ("github_oauth_token", "gho_", r"[A-Za-z0-9]{36}(?![A-Za-z0-9])", _token),
    ("github_app_token", "ghu_|ghs_", r"[A-Za-z0-9]{36}(?![A-Za-z0-9])", _token),
    ("github_refresh_token", "ghr_", r"[A-Za-z0-9]{36}(?![A-Za-z0-9])", _token),
    ("gitlab_pat", "glpat-", rf"{_W}{{20,}}(?:\.[0-9a-z]{{2}}\.[0-9a-z]{{7,9}})?(?!{_W})", _token),
    ("gitlab_token", "gldt-|glrt-|glrtr-|glptt-|glcbt-|gloas-|glsoat-|glffct-|glimt-|glagent-"
     "|glft-|GR1348941", rf"{_W}{{20,}}(?!{_W})", _token),
    ("slack_token", "xoxb-|xoxa-|xoxp-|xoxs-|xoxo-|xoxr-|xoxe-", r"\d[0-9A-Za-z-]{8,}(?![\w-])",
     _token),
    ("slack_token", "xoxe.xoxb-|xoxe.xoxp-|xapp-", r"\d-[0-9A-Za-z-]{20,}(?![\w-])", _token),
    ("slack_webhook_url", "hooks.slack.com/services/|hooks.slack.com/workflows/"
     "|hooks.slack.com/triggers/", r"(?P<v>[\w/-]{20,})", _token),
    ("stripe_key", "sk_live_|sk_test_|rk_live_|rk_test_", r"[A-Za-z0-9]{20,247}(?![A-Za-z0-9])",
     _token),
    ("stripe_webhook_secret", "whsec_", r"[A-Za-z0-9+/=]{32,}", _token),
    ("anthropic_api_key", "sk-ant-", rf"(?:api|admin|sid|oat)\d\d-{_W}{{80,120}}(?!{_W})",
     _token),
    # Project and service keys, or legacy keys carrying "T3BlbkFJ" (base64 of "OpenAI").
    ("openai_api_key", "sk-", r"(?:(?:proj|svcacct|admin|None)-[\w-]{40,300}"
     r"|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})(?![\w-])", _token),
    ("huggingface_token", "hf_|api_org_", r"[A-Za-z0-9]{34}(?![A-Za-z0-9])", _varied),
    ("npm_token", "npm_", r"[A-Za-z0-9]{36}(?![A-Za-z0-9])", _token),
    ("pypi_token", "pypi-AgE", rf"{_W}{{50,}}", _token),
    ("twilio_api_key", "SK", r"[0-9a-fA-F]{32}(?![0-9A-Za-z])", _varied),
    ("sendgrid_api_key", "SG.", rf"{_W}{{22}}\.{_W}{{43}}(?!{_W})", _token),
    ("mailgun_api_key", "key-", r"[0-9a-f]{32}(?![0-9A-Za-z])", _token),
    ("shopify_token", "shpat_|shpca_|shppa_|shpss_", r"[a-fA-F0-9]{32}(?![0-9A-Za-z])", _token),
    ("square_token", "EAAA", rf"{_W}{{60}}(?!{_W})", _token),
    ("square_token", "sq0atp-|sq0csp-", rf"{_W}{{22,43}}(?!{_W})", _token),
    ("discord_bot_token", "M|N|O", rf"{_W}{{23,25}}\.{_W}{{6}}\.{_W}{{27,38}}(?!{_W})", _discord),
    ("discord_webhook_url", "discord.com/api/webhooks/|discordapp.com/api/webhooks/",
     r"(?P<v>\d+/[\w-]{60,80})", _token),
    ("telegram_bot_token", ":AA", rf"{_W}{{33}}(?!{_W})", _telegram),
    ("jwt", "eyJ", r"[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]*", _token),
    ("private_key", "-----BEGIN ", r"(?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----", _pem_begin),
    ("private_key", "-----END ", r"(?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----", _pem_end),
    ("url_password", "://", r"[^\s:/?#@\"'`<>\[\]]{0,64}:(?P<v>[^\s:/?#\"'`<>]{1,200})@(?=[\w\[])",
     _url_password),
    ("bearer_token", "Bearer", r"\s+(?P<v>[A-Za-z0-9._~+/-]{16,}=*)(?![\w.~+/=-])", _bearer),
    ("basic_auth", "Basic", r"\s+(?P<v>[A-Za-z0-9+/]{8,}={0,2})(?![\w+/=])", _basic),
)
# Python's regex engine scans fast for a pattern's first literal character, but an alternation
# over many first characters is ~3x slower on code. So each rule is anchored at one character:
# the first of its prefix or, when that is a lower-case letter (frequent in code), the last
# ("ghp_" is found at "_", then a look-behind checks "ghp"). One regex per anchor character;
# frequent anchors get a cheap guard, and a few prefixes move to share another rule's scan.
_GUARDS = {"_": r"(?<=[a-z]_)(?=[A-Za-z0-9][A-Za-z0-9+/=]{15})", "-": r"(?<=[a-z0-9]-)(?=[\w-]{7})",
           "=": r"(?=[A-Za-z0-9%+/]{40})", ":": r"(?=//|AA)", "/": r"(?=[\w/-]{20})",
           "J": r"(?=[\w-]{8})"}
_ANCHOR_AT = {"FwoGZXIvYXdz": 3, "IQoJb3JpZ2luX2Vj": 3, "-----BEGIN ": 5, "-----END ": 6,
              "EAAA": 1, "pypi-AgE": 5}
_Meta = tuple[str, _Check, int, "str | None"]  # kind, check, anchor offset, value group


def _compile_rules() -> tuple[tuple[tuple[str, re.Pattern[str]], ...], list[_Meta]]:
    groups: dict[str, list[str]] = {}
    meta: list[_Meta] = []
    for kind, prefixes, rest, check in _RULES:
        for prefix in prefixes.split("|"):
            i = len(meta)  # named groups: v<i> is the secret, the empty k<i> names the rule
            k = _ANCHOR_AT.get(prefix, len(prefix) - 1 if prefix[0].islower() else 0)
            lookbehind = f"(?<={re.escape(prefix[:k + 1])})" if k else ""
            body = rest.replace("(?P<v>", f"(?P<v{i}>") + f"(?P<k{i}>)"
            groups.setdefault(prefix[k], []).append(lookbehind + re.escape(prefix[k + 1 :]) + body)
            meta.append((kind, check, k, f"v{i}" if "(?P<v>" in rest else None))
    return tuple((a, re.compile(re.escape(a) + _GUARDS.get(a, "") + "(?:" + "|".join(b) + ")"))
                 for a, b in groups.items()), meta


_TOKENS, _TOKEN_META = _compile_rules()
# Kinds whose value may hold a more specific token; the specific kind wins on overlap.
_CONTAINERS = frozenset({"url_password", "bearer_token", "basic_auth"})

# --- assignments -------------------------------------------------------------------------------

# keyword -> endings that still name a credential ("pass" + "word"). str.find per keyword is
# several times faster than one regex alternation over the text.
_KEYWORDS = {"pass": ("", "word", "wd", "phrase"), "pwd": ("",), "secret": ("",),
             "token": ("",), "key": ("",), "credential": ("", "s")}
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
                       "resume", "verification", "csrf", "xsrf", "public", "marker", "update"})
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
       (?:(?P<eol>[ \t]*(?:\Z|(?=[\n\r#`&\\])))|(?P<tight>(?=[;"']))|(?=\s)))  # and its end
""", re.X)
# Unquoted right-hand sides that read as code, not as a literal: parsed.auth, auth_from_netrc.
_VARIABLE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|[A-Za-z_]+")
_TOKEN_CHARS = re.compile(r"[\w+/=.~:!@#$%^&*(),;?-]+")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_REFINE = tuple((kind, names, re.compile(fmt)) for kind, names, fmt in (  # key name + format
    ("aws_secret_access_key", ("secretaccesskey", "awssecretkey"), r"[A-Za-z0-9/+]{40}"),
    ("aws_session_token", ("sessiontoken", "securitytoken"), r"[A-Za-z0-9/+=]{100,}"),
    ("azure_client_secret", ("azureclientsecret",), r"[\w~.+/=-]{30,44}"),
    ("twilio_auth_token", ("twilioauthtoken", "twiliotoken"), r"[0-9a-f]{32}"),
    ("mailgun_api_key", ("mailgunapikey", "mailgunkey"), r"[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}")))
_PLACEHOLDER_WORDS = frozenset({
    "none", "null", "nil", "undefined", "true", "false", "string", "str", "bytes", "int", "number",
    "bool", "boolean", "object", "token", "key", "apikey", "api_key", "value", "default", "empty",
    "required", "optional", "hidden", "masked", "admin", "root", "guest", "user", "username",
    "pass", "letmein", "qwerty", "abc123", "123456", "12345678", "foo", "bar", "baz", "qux",
    "foobar", "changeit", "postgres", "mysql"})
_PLACEHOLDER_BITS = ("password", "passwd", "secret", "${", "{{", "{%", "<", ">", "%s", "%(",
                     "%d", "example", "placeholder", "changeme", "change_me", "change-me",
                     "your_", "your-", "yourpass", "yourtoken", "yourkey", "xxxx", "****", "...",
                     "dummy", "fake", "redacted", "replace", "fixme", "todo", "sample", "mock",
                     "insert", "token_here", "key_here")
_LEET = str.maketrans("0134579@$", "oieastgas")


def _placeholder(value: str, key_words: tuple[str, ...]) -> bool:
    """True for values that stand in for a secret: templates, fillers, defaults, key echoes."""
    low = unquote(value).lower()
    if len(set(value)) <= 2 or low in _PLACEHOLDER_WORDS or low.startswith("test"):
        return True
    if value[0] in "$%{@#" or any(bit in low for bit in _PLACEHOLDER_BITS):
        return True
    leet = low.translate(_LEET)  # P@55w0rd, S3cr3t
    if "password" in leet or "secret" in leet or any(len(w) >= 4 and w in low for w in key_words):
        return True
    # Typed-in sequences ("AB1C2defGHijk...", "abcdef123456") are examples, not random output.
    up = [ord(b) - ord(a) == 1 for a, b in zip(low, low[1:], strict=False)]
    return sum(x and y for x, y in zip(up, up[1:], strict=False)) >= 4


def _looks_random(value: str) -> bool:
    """Long, with digits and letters, no code punctuation, high entropy: a machine-made secret.

    Identifiers, dotted names, regexes, UUIDs (request IDs), AWS ARNs and prose fail it.
    """
    if (len(value) < 16 or not _TOKEN_CHARS.fullmatch(value) or _UUID.fullmatch(value)
            or value.startswith("arn:")):
        return False
    return (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
            and _entropy(value) >= 3.0)


def _classify_key(words: list[str]) -> str | None:
    while words and words[-1].isdigit():
        words.pop()
    if not words or any(w in _NEGATORS for w in words):
        return None
    last = words[-1]
    if last in _PASSWORD_WORDS:
        return "password"
    if last in _SECRET_WORDS or (last == "key" and words[-2:-1] and words[-2] in _KEY_QUALIFIERS):
        return "generic_secret"
    return None


def _value_ok(kind: str, value: str, bare: bool, key_words: tuple[str, ...]) -> bool:
    if (not value or _placeholder(value, key_words) or "://" in value
            or value.startswith(("/", "./", "~/")) or (bare and _VARIABLE.fullmatch(value))):
        return False
    if kind != "password":
        return _looks_random(value)
    # Letters plus a digit or symbol, as password policies demand: this keeps doc examples such
    # as "IAmSensitive" and translations ("Passwort") out, at the cost of letters-only passwords.
    return (len(value) >= 6 and not any(c.isspace() for c in value)
            and any(c.isalpha() for c in value) and not value.isalpha())


def _key_start(text: str, hit: int) -> int:
    start = hit
    while start and hit - start < 64 and (text[start - 1].isalnum() or text[start - 1] in "_.-"):
        if text[start - 2 : start - 1] == "\\" and text[start - 1] in "nrt":
            break  # "\npassword=..." inside a string literal: the escape is not part of the name
        start -= 1
    return start


def _assignment(text: str, low: str, kw: str, hit: int) -> _Hit:
    """Judge one keyword occurrence: is it a credential name assigned a literal secret?"""
    tail = _ID_TAIL.match(text, hit + len(kw), hit + 64)
    end = tail.end() if tail else hit + len(kw)
    last = low[hit:end].rstrip("_.-0123456789")
    if last[len(kw) :] not in _KEYWORDS[kw]:
        return None  # the name goes on: passwordField, tokenizer
    start = _key_start(text, hit)
    if start and text[start - 1] == ":":
        return None  # a qualified name: AWS::SecretsManager::Secret, Foo::token
    words = [w.lower() for w in _WORDS.findall(text, start, hit)]
    if hit > start and text[hit - 1].isalpha() and not (
            text[hit - 1].islower() and text[hit].isupper()) and (
            not words or words[-1] not in _COMPOUNDS) and not (
            len(last) > 4 and text[start:end].isupper()):
        return None  # inside a word (bypass, monkey), not at a name boundary (PGPASSWORD)
    kind = _classify_key([*words, last])
    # The window bounds the work per keyword: "password=password=..." stays linear.
    m = _ASSIGN.match(text, end, end + 2048) if kind else None
    if m is None or kind is None:
        return None
    group = next(g for g in "dstb" if m.group(g) is not None)
    value, (vs, ve) = m.group(group), m.span(group)
    # An unquoted value must end its line, or sit tight in "k=v;" (a connection string), or
    # follow "--flag="; otherwise "password = pw2" reads as code, and "pass :class:" as prose.
    if group == "b" and (not (m.group("eol") is not None or text[start] == "-" or (
            m.group("tight") is not None and not m.group("pre") and text[vs - 1] in "=:"))
            or (m.group("pre") and m.group("sep") == ":")):
        return None
    joined = "".join(words) + last
    for vendor, names, fmt in _REFINE:
        if any(n in joined for n in names) and fmt.fullmatch(value):
            return None if _placeholder(value, ()) else (vendor, vs, ve)
    return (kind, vs, ve) if _value_ok(kind, value, group == "b", (*words, last)) else None


# --- public API --------------------------------------------------------------------------------


def find_secrets(text: str) -> list[Redaction]:
    """Every secret in ``text``: non-overlapping, sorted by start."""
    cands: list[tuple[int, int, int, str]] = []  # (rank, start, end, kind)
    for anchor, regex in _TOKENS:
        pos = text.find(anchor)  # memchr: 20x faster than the regex scan when it is absent
        while pos >= 0 and (m := regex.search(text, pos)) is not None:
            kind, check, offset, group = _TOKEN_META[int(m.lastgroup[1:])]  # type: ignore[index]
            s, e = m.span(group) if group else (m.start() - offset, m.end())
            if hit := check(text, kind, s, e):
                cands.append((1 if kind in _CONTAINERS else 0, hit[1], hit[2], hit[0]))
            pos = m.start() + 1  # rescan inside: a URL password may itself be a known token
    low = text.lower()
    if len(low) != len(text):  # a few non-ASCII letters lower-case to two characters
        low = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
    for kw in _KEYWORDS:
        i = low.find(kw)
        while i >= 0:
            if hit := _assignment(text, low, kw, i):
                cands.append((2, hit[1], hit[2], hit[0]))
            i = low.find(kw, i + len(kw))
    # Specific kinds first, then earlier and longer; ``starts``/``ends`` keep the taken ranges
    # disjoint and sorted.
    starts: list[int] = []
    ends: list[int] = []
    out: list[Redaction] = []
    for _, s, e, kind in sorted(cands, key=lambda c: (c[0], c[1], c[1] - c[2])):
        i = bisect_right(starts, s)
        if s >= e or (i and ends[i - 1] > s) or (i < len(starts) and starts[i] < e):
            continue
        starts.insert(i, s)
        ends.insert(i, e)
        out.append(Redaction(kind, s, e))
    return sorted(out, key=lambda r: r.start)


def redact(text: str) -> tuple[str, dict[str, int]]:
    """``text`` with each secret replaced by ``[REDACTED:<kind>]``, and the counts by kind."""
    counts: dict[str, int] = {}
    # Removing a secret can expose another: a value rejected as a placeholder because of what
    # a nested token held may pass once that token is gone. Passes repeat until nothing is found.
    for _ in range(4):
        found = find_secrets(text)
        if not found:
            break
        parts: list[str] = []
        last = 0
        for r in found:
            parts += (text[last : r.start], f"{MARKER_PREFIX}{r.kind}]")
            last = r.end
            counts[r.kind] = counts.get(r.kind, 0) + 1
        text = "".join(parts) + text[last:]
    return text, counts


def redact_label(value: str | None) -> str | None:
    """A symbol, heading or path with any secret masked: Markdown headings and docstring-derived
    labels are repository text too ("## Rotate ghp_... before release")."""
    return redact(value)[0] if value else value
