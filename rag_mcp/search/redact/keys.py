"""Private-key blocks: PEM (``-----BEGIN ... PRIVATE KEY-----``) and PuTTY ``.ppk`` files.

A key block is redacted whole, also when the span cuts it (the span starts or ends inside the
key), when its lines are quoted, commented, indented or concatenated, and when its newlines are
JSON escapes. A header string constant in a PEM parser is not a key: real blocks carry key
material (64+ base64 characters), and a PuTTY file's private lines follow ``Private-Lines: N``.
"""

from __future__ import annotations

import re

Hit = tuple[str, int, int] | None  # (kind, start, end)

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


def pem_begin(text: str, kind: str, s: int, e: int) -> Hit:
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


def pem_end(text: str, kind: str, s: int, e: int) -> Hit:
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


_PPK_COUNT = re.compile(r"[ \t]*(\d{1,3})[ \t]*\r?\n")
_PPK_LINE = re.compile(r"[ \t]*[A-Za-z0-9+/=]{4,}[ \t]*(?:\r?\n|\Z)")


def putty(text: str, kind: str, s: int, e: int) -> Hit:
    """The base64 lines after ``Private-Lines: N`` (as many of the N as the span shows)."""
    count = _PPK_COUNT.match(text, e)
    if count is None:
        return None
    pos, seen = count.end(), 0
    while seen < int(count.group(1)) and (line := _PPK_LINE.match(text, pos)) is not None:
        pos, seen = line.end(), seen + 1
    while pos > count.end() and text[pos - 1] in "\r\n":
        pos -= 1
    return (kind, count.end(), pos) if seen else None


def putty_mac(text: str, kind: str, s: int, e: int) -> Hit:
    """A span that starts inside a PuTTY key's private lines: the base64 lines right above
    ``Private-MAC:`` back to the first one the span shows."""
    start, material, line_end = s, 0, s
    while line_end > 0:
        line_start = text.rfind("\n", 0, line_end - 1) + 1
        line = text[line_start:line_end].strip()
        if not _B64_RUN.fullmatch(line):
            break
        start, material, line_end = line_start, material + len(line), line_start
    end = s
    while end > start and text[end - 1] in "\r\n":
        end -= 1
    return (kind, start, end) if material >= 16 else None
