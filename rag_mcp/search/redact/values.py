"""Judging a value that sits where a credential goes: a secret, or something standing in for one.

The stance: a literal in a credential's place is a secret, however example-like it looks
(``S3cr3tPassw0rd``, ``test-4f9a...``); we cannot tell a sample from a real one and hiding a fake
costs nothing. What is *not* a value: references and templates (``${DB_PASSWORD}``,
``{{ secret }}``, ``%(password)s``, ``<your-token>``), masks (``****``, ``xxxx``), a bare label
that names the slot (``password``, ``token``, ``None``) and instructions (``changeme``,
``your_api_key``). Names that are not clearly credentials need the value to look machine-made
too (:func:`looks_random`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from urllib.parse import unquote

#: Bare words that name the slot or a type instead of filling it.
LABEL_WORDS = frozenset({
    "none", "null", "nil", "undefined", "true", "false", "string", "str", "bytes", "int",
    "number", "bool", "boolean", "object", "any", "value", "default", "empty", "required",
    "optional", "hidden", "masked", "password", "passwd", "pass", "pwd", "passphrase", "secret",
    "secrets", "token", "key", "apikey", "api_key", "api-key", "credential", "credentials",
    "auth", "username", "user", "foo", "bar", "baz", "qux", "foobar"})
#: Pieces that mark a template, a reference, a mask or an instruction to the reader.
TEMPLATE_BITS = ("${", "{{", "{%", "<%", "%s", "%(", "%d", "#{", "xxxx", "XXXX", "****", "...",
                 "\u2026", "your_", "your-", "yourpass", "yourtoken", "yourkey", "changeme",
                 "change_me", "change-me", "placeholder", "redacted", "replace_", "replace-",
                 "replaceme", "insert_", "insert-", "_here", "-here", "fixme", "todo")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_TOKEN_CHARS = re.compile(r"[\w+/=.~:!@#$%^&*(),;?-]+")
# Names, not values: snake_case or ENV_NAME words without digits ("db_password"), type unions
# in doc comments ("string|null", "?string").
_NAME_LIKE = re.compile(r"[a-z]+(?:_[a-z]+)+|[A-Z]+(?:_[A-Z]+)+"
                        r"|\??[A-Za-z_][\w.\\]*(?:\|[A-Za-z_][\w.\\]*)+")
_BRACED = re.compile(r"\{\w*\}|<[\w .-]*>|\[\w*\]")  # {password}, <token>, [secret]
# A whole value that is a variable or a lookup: $DB_PASS, $(pass show db), %APPDATA%,
# @Microsoft.KeyVault(SecretUri=...), env:DB_PASSWORD. A password that merely starts with "$"
# ("$uper-S3cret!") is not one.
_REFERENCE = re.compile(r"\$[A-Za-z_]\w*|\$[({].*[)}]|%[A-Za-z_]\w*%|@[A-Za-z_][\w.]*(?:\(.*\))?"
                        r"|(?:env|file|fd|vault|ssm|op):[\w./:-]+")


def entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values()) if n else 0.0


def is_uuid(value: str) -> bool:
    return _UUID.fullmatch(value) is not None


def placeholder(value: str) -> bool:
    """True for values that stand in for a secret: templates, references, masks, slot labels."""
    if not value:
        return True
    low = unquote(value).lower()
    if len(set(value)) <= 2 or low.strip("_-'\" ") in LABEL_WORDS:
        return True
    if "EXAMPLE" in value:  # AWS's and others' documented keys (AKIAIOSFODNN7EXAMPLE)
        return True
    if _NAME_LIKE.fullmatch(value):
        return True
    if _REFERENCE.fullmatch(value) or _BRACED.search(value) or any(b in low for b in TEMPLATE_BITS):
        return True
    return value.startswith("<") or value.endswith(">")


def looks_random(value: str) -> bool:
    """Long, with digits and letters, no code punctuation, high entropy: a machine-made secret.

    Identifiers, dotted names, regexes, UUIDs (request IDs), AWS ARNs and prose fail it.
    """
    if (len(value) < 16 or not _TOKEN_CHARS.fullmatch(value) or is_uuid(value)
            or value.startswith("arn:")):
        return False
    return (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
            and entropy(value) >= 3.0)


def password_like(value: str) -> bool:
    """A password a person or a generator chose: one token, six characters or more, not a word.

    Letters alone pass only from 16 characters (a passphrase): shorter ones are far more often a
    translation or a doc example ("Passwort", "IAmSensitive") than a credential.
    """
    if len(value) < 6 or any(c.isspace() for c in value) or not any(c.isalnum() for c in value):
        return False
    return not value.isalpha() or len(value) >= 16


def secret_value(value: str, *, password: bool, uuid_ok: bool = False) -> bool:
    """Whether ``value`` in a credential's place is a secret (see the module docstring)."""
    if placeholder(value) or "://" in value or value.startswith(("/", "./", "~/")):
        return False
    if password:
        return password_like(value)
    return looks_random(value) or (uuid_ok and is_uuid(value))
