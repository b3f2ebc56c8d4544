"""Secrets told by where they stand rather than by their shape.

Passwords inside URLs (also holding "#", "/" or "@") and query strings (``?api_key=...``),
``Authorization`` and ``X-...-Token`` header values, command-line passwords (``curl -u u:pw``,
``sshpass -p``, ``mysql -ppw``, ``docker login -p``, ``--password pw``), ``.pgpass`` lines, an AWS
secret key written in prose, "the password is ...". Each rule starts from a literal found with
``str.find`` and matches within a bounded window with possessive quantifiers, so hostile text is
scanned in linear time.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rag_mcp.search.redact.assign import classify_words
from rag_mcp.search.redact.values import (
    entropy,
    is_uuid,
    looks_random,
    password_like,
    placeholder,
    secret_value,
)

Cand = tuple[int, int, int, str]  # (rank, start, end, kind)
RANK = 1  # after vendor tokens (a token inside a URL password keeps its own kind)
_WINDOW = 1024


def _finds(hay: str, needle: str) -> list[int]:
    out, i = [], hay.find(needle)
    while i >= 0:
        out.append(i)
        i = hay.find(needle, i + 1)
    return out


# --- URLs ----------------------------------------------------------------------------------------

# user ":" password "@" host: the password may hold ":", "/", "#" and "@" (unencoded in many
# DSNs), so the password runs to the first "@" that a host and the URL's next part follow.
_USERINFO = re.compile(r"""(?P<user>[^\s:/?#@"'`<>\[\]{}]{0,128}+):
    (?P<v>[^\s"'`<>]{1,256}?)@(?:\[[0-9A-Fa-f:.]{2,64}+\]|[A-Za-z0-9][A-Za-z0-9.-]{0,253}+)
    (?=[:/?\#\s"'`,;)\]}>|\\]|\Z)""", re.X)
_PORT_PATH = re.compile(r"\d{1,5}(?:[/?#].*)?")  # host:port/path@... is no password
_PORT_NEXT = re.compile(r"\d{1,5},")  # host:port,user:pw@host2 (a multi-host URL)
_QUERY = re.compile(r"(?P<name>[A-Za-z][\w.-]{0,39}+)=(?P<v>[^&#?=\s\"'`<>\\]{1,512}+={0,2})")


def _urls(text: str, low: str) -> list[Cand]:
    out: list[Cand] = []
    for pos in _finds(text, "://"):
        if not pos or not (text[pos - 1].isalnum() or text[pos - 1] in "+.-"):
            continue
        m = _USERINFO.match(text, pos + 3, pos + 700)
        if m is not None and (port := _PORT_NEXT.match(m.group("v"))):
            m = _USERINFO.match(text, m.start("v") + port.end(), pos + 700)
        if m is None:
            continue
        v = m.group("v")
        if not placeholder(v) and not _PORT_PATH.fullmatch(v):
            out.append((RANK, m.start("v"), m.end("v"), "url_password"))
    for sep in "?&":
        for pos in _finds(text, sep):
            m = _QUERY.match(text, pos + 1, pos + 600)
            if m is None:
                continue
            words = re.findall(r"[a-z]+|\d+", m.group("name").lower())
            kind = "url_query_secret" if words in (["key"], ["sig"], ["signature"]) else (
                classify_words(words))
            v = m.group("v")
            if kind and secret_value(v, password=kind == "password", uuid_ok=True):
                out.append((RANK, m.start("v"), m.end("v"), "url_query_secret"))
    return out


# --- headers -------------------------------------------------------------------------------------

_AUTH = re.compile(r"""authorization["'`]?[ \t]*[:=,][ \t]*["'`]?
    (?:(?P<scheme>[A-Za-z][\w-]{1,24}+)[ \t]+)?(?P<v>[A-Za-z0-9._~+/=:-]{16,1024}+)""", re.X | re.I)
_HEADER = re.compile(r"""[ \t]*:[ \t]*(?P<v>[A-Za-z0-9._~+/=-]{16,1024}+)(?=[\s"'`,;]|\Z)""")
# X-Api-Key, X-Auth-Token, X-Vault-Token, ... and a few unprefixed names services use.
_HEADER_NAME = re.compile(r"(?i:x-[a-z0-9]+(?:-[a-z0-9]+)*|api-key|private-token|auth-token"
                          r"|access-token|client-secret|ocp-apim-subscription-key)")
_OWN_SCHEMES = frozenset({"bearer", "basic"})  # redacted by their token rules


def _token_like(v: str) -> bool:
    return "://" not in v and not placeholder(v) and (looks_random(v) or is_uuid(v))


def _headers(text: str, low: str) -> list[Cand]:
    out: list[Cand] = []
    for pos in _finds(low, "authorization"):
        m = _AUTH.match(text, pos, pos + 1200)
        if m and (m.group("scheme") or "").lower() not in _OWN_SCHEMES and _token_like(
                m.group("v")):
            out.append((RANK, m.start("v"), m.end("v"), "auth_header_token"))
    for word in ("-key", "-token", "-secret", "-auth"):
        for pos in _finds(low, word):
            end = pos + len(word)
            if end < len(low) and (low[end].isalnum() or low[end] == "-"):
                continue
            start = pos
            while start and (text[start - 1].isalnum() or text[start - 1] == "-") and (
                    pos - start < 60):
                start -= 1
            if not _HEADER_NAME.fullmatch(text, start, end):
                continue
            m = _HEADER.match(text, end, end + 1100)
            if m and _token_like(m.group("v")):
                out.append((RANK, m.start("v"), m.end("v"), "auth_header_token"))
    return out


# --- command lines -------------------------------------------------------------------------------

_VAL = r"""(?P<q>["']?)(?P<v>[^\s"'\\]{1,256}+)(?P=q)(?=[\s;&|)`]|\Z)"""
_CLI = (  # (tool words, pattern after a tool word, kind)
    (("curl",), re.compile(r"(?:-u|--user|--proxy-user|-U)(?:[ \t]+|=)?(?P<q>[\"']?)"
                           r"(?P<user>[^\s:\"']{0,128}+):(?P<v>[^\s\"']{1,256}+)(?P=q)"),
     "cli_password"),
    (("sshpass",), re.compile(r"-p[ \t]*" + _VAL), "cli_password"),
    (("mysql", "mariadb"), re.compile(r"-p" + _VAL), "cli_password"),  # glued: "-p pw" prompts
    ((" login",), re.compile(r"(?:-p|--password)(?:[ \t]+|=)" + _VAL), "cli_password"),
)
_FLAG = re.compile(r"-(?:[a-z0-9]{1,20}+-){0,4}+(?P<kw>password|passwd|pass|token|secret|api-key"
                   r"|apikey|access-key|secret-key|auth-token)[ \t]+" + _VAL)


def _line_end(text: str, pos: int) -> int:
    nl = text.find("\n", pos)
    return min(len(text) if nl < 0 else nl, pos + _WINDOW)


def _cli(text: str, low: str) -> list[Cand]:
    out: list[Cand] = []
    for tools, rx, kind in _CLI:
        done = 0  # each flag is tried once however many tool words share its line
        for pos in sorted(p for tool in tools for p in _finds(low, tool)):
            start, end = max(pos, done), _line_end(text, pos)
            for flag in _finds(text[start:end], " -"):
                m = rx.match(text, start + flag + 1, end)
                if m and password_like(m.group("v")) and not placeholder(m.group("v")):
                    out.append((RANK, m.start("v"), m.end("v"), kind))
            done = max(done, end)
    for pos in _finds(text, "-"):
        if pos and not text[pos - 1].isspace():
            continue
        m = _FLAG.match(text, pos + 1, _line_end(text, pos))
        if m is None:
            continue
        pw = m.group("kw").startswith("pass")
        if secret_value(m.group("v"), password=pw, uuid_ok=True):
            out.append((RANK, m.start("v"), m.end("v"), "cli_password" if pw else "cli_token"))
    return out


# --- files and prose -----------------------------------------------------------------------------

# hostname:port:database:username:password, one per line (also quoted in an echo command).
# Found at its ":port:" (a literal-led pattern the regex engine scans for in C).
_PG_PORT = re.compile(r":(?:\*|[1-9]\d{0,4}+):")
_PG_REST = re.compile(r"(?P<db>[^\s:'\"`]{1,64}+):(?P<user>[^\s:'\"`]{1,64}+)"
                      r":(?P<v>[^\s'\"`]{1,256}+)")
_PG_HOST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-*")
_HEX_GROUP = re.compile(r"[0-9a-fA-F]{1,4}")  # an IPv6 address has the same colons
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_PROSE_PW = re.compile(r"[ \t]+(?:is|was|of)[ \t]+[\"'`]?(?P<v>[^\s\"'`]{6,128}+)")
_MAILCHIMP = re.compile(r"(?<![0-9a-z])[0-9a-f]{32}-us\d{1,2}(?![0-9A-Za-z])")


def _back_to_word(text: str, end: int, chars: frozenset[str], most: int) -> int | None:
    """Start of the run of ``chars`` ending at ``end`` if it starts a line or follows a space or
    a quote, else None."""
    start = end
    while start and end - start < most and text[start - 1] in chars:
        start -= 1
    ok = start < end and (start == 0 or text[start - 1] in " \t\n\r\"'`")
    return start if ok else None


def _files_and_prose(text: str, low: str) -> list[Cand]:
    out: list[Cand] = []
    for m in _PG_PORT.finditer(text):
        host = _back_to_word(text, m.start(), _PG_HOST, 253)
        rest = _PG_REST.match(text, m.end(), m.end() + 400)
        if host is None or rest is None:
            continue
        name, v = text[host : m.start()], rest.group("v")
        if all(_HEX_GROUP.fullmatch(x) for x in (name, rest.group("db"), rest.group("user"))):
            continue
        if (name == "*" or any(c.isalpha() or c == "." for c in name)) and (
                password_like(v) and not placeholder(v)):
            out.append((RANK, rest.start("v"), rest.end("v"), "pgpass_password"))
    scanned = 0  # each character is looked at by one window at most
    for pos in sorted(p for w in ("aws", "access key", "access_key", "accesskey")
                      for p in _finds(low, w)):
        lo, hi = max(pos, scanned), min(len(text), pos + 300)
        for m in _AWS_SECRET.finditer(text, lo, min(len(text), hi + 41)):
            v = m.group()
            if m.start() < hi and (
                    any(c.isupper() for c in v) and any(c.islower() for c in v)
                    and any(not c.isalpha() for c in v) and entropy(v) >= 4.2
                    and "EXAMPLE" not in v):
                out.append((RANK, m.start(), m.end(), "aws_secret_access_key"))
        scanned = max(scanned, hi)
    for pos in _finds(low, "password"):
        said = _PROSE_PW.match(text, pos + 8, pos + 160)
        if said:
            v = said.group("v").rstrip(".,;:!?)")
            if any(c.isdigit() for c in v) and password_like(v) and not placeholder(v):
                out.append((RANK, said.start("v"), said.start("v") + len(v), "password"))
    for pos in _finds(low, "-us"):
        key = _MAILCHIMP.search(text, max(0, pos - 33), pos + 8)
        if key:
            out.append((RANK, key.start(), key.end(), "mailchimp_api_key"))
    return out


RULES: tuple[Callable[[str, str], list[Cand]], ...] = (_urls, _headers, _cli, _files_and_prose)


def find(text: str, low: str) -> list[Cand]:
    return [c for rule in RULES for c in rule(text, low)]
