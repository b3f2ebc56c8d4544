"""git's ignore patterns (.gitignore, .ragignore, info/exclude), matched in linear time.

A pattern follows git's wildmatch with WM_PATHNAME, on bytes as git compares them: ``*``, ``?``
and ``[...]`` never match a ``/`` (``?`` and a set take one byte, so ``caf?.txt`` does not match
``café.txt``), ``**`` is special only as a whole path component, ``[[:alpha:]]`` classes,
backslash escapes, unescaped trailing spaces dropped, ``!`` negates, a ``/`` anchors the
pattern to its file's folder and a trailing ``/`` makes it match folders only. Each ignore file
becomes RE2 sets (google-re2): one call tells every rule that matches a path, in time linear in
the path whatever the patterns, and the last of them decides. A backtracking engine cannot
promise that: Python's ``re`` (which holds the GIL meanwhile) spent minutes on the one
25-character line ``*?*?*?*?*?*?*?*?*?*?*?*?b``, and git itself over a minute on ``**/`` twenty
times then ``x`` against a 13-level path (tests/test_hostile_index.py).

The translation from pattern to expression is ours, tested against git itself on tricky and
random rules (tests/test_walk.py), because the maintained matchers measured either follow git on
a backtracking ``re`` (gitmatch, dulwich) or differ from git: pathspec's ``GitIgnoreSpec`` judges
whole file paths with its own precedence between a folder's rules and a file's, so ``cache``
followed by ``!src*`` keeps ``src/cache/a.py``, which git ignores (22% of random one-file rule
sets listed other files than git), and it rejects some lines git accepts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

import re2

log = logging.getLogger(__name__)

_SLASH = 0x2F
#: no path a walk meets is longer (PATH_MAX): a pattern that needs more bytes matches none
_LONGEST_PATH = 4096
_ANY_DIRS = rb"(?:.*/)?"
_CLASSES: dict[bytes, tuple[tuple[int, int], ...]] = {
    b"alnum": ((0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)),
    b"alpha": ((0x41, 0x5A), (0x61, 0x7A)),
    b"blank": ((0x09, 0x09), (0x20, 0x20)),
    b"cntrl": ((0x00, 0x1F), (0x7F, 0x7F)),
    b"digit": ((0x30, 0x39),),
    b"graph": ((0x21, 0x7E),),
    b"lower": ((0x61, 0x7A),),
    b"print": ((0x20, 0x7E),),
    b"punct": ((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)),
    b"space": ((0x09, 0x0D), (0x20, 0x20)),
    b"upper": ((0x41, 0x5A),),
    b"xdigit": ((0x30, 0x39), (0x41, 0x46), (0x61, 0x66)),
}
#: RE2's memory per set; a lazily built DFA lives in it, so a set that compiles never fails to
#: match (RE2::Set has no fallback, and its DFA never gives up for being slow)
_SET_MEMORY = 64 << 20


class _Never(Exception):
    """The pattern can match no path (git's wildmatch gives up on it)."""


def encode(text: str) -> bytes:
    """A path or pattern as the bytes git compares (undecodable bytes come back as they were)."""
    return text.encode("utf-8", "surrogateescape")


def _byte(b: int) -> bytes:
    return b"\\x%02x" % b


def _char_class(ranges: list[tuple[int, int]], negated: bool) -> bytes:
    """An RE2 class of bytes that never matches ``/`` (WM_PATHNAME)."""
    if negated:
        ranges = [*ranges, (_SLASH, _SLASH)]
    else:
        kept: list[tuple[int, int]] = []
        for lo, hi in ranges:
            if lo <= _SLASH <= hi:
                kept += [r for r in ((lo, _SLASH - 1), (_SLASH + 1, hi)) if r[0] <= r[1]]
            else:
                kept.append((lo, hi))
        if not kept:
            raise _Never
        ranges = kept
    body = b"".join(_byte(lo) if lo == hi else _byte(lo) + b"-" + _byte(hi) for lo, hi in ranges)
    return b"[" + (b"^" if negated else b"") + body + b"]"


def _bracket(pat: bytes, i: int) -> tuple[bytes, int]:
    """Translate the ``[...]`` set starting after the ``[`` at ``pat[i - 1]`` like wildmatch."""
    n = len(pat)
    negated = i < n and pat[i] in b"!^"
    i += negated
    ranges: list[tuple[int, int]] = []
    prev: int | None = None
    first = True
    while True:
        if i >= n:
            raise _Never  # unterminated: wildmatch gives up and the pattern matches nothing
        c = pat[i]
        if c == 0x5D and not first:  # "]"
            break
        first = False
        if c == 0x5C:  # "\\"
            if i + 1 >= n:
                raise _Never
            prev = pat[i + 1]
            ranges.append((prev, prev))
            i += 2
        elif c == 0x2D and prev is not None and i + 1 < n and pat[i + 1] != 0x5D:  # "-"
            hi, i = pat[i + 1], i + 2
            if hi == 0x5C:
                if i >= n:
                    raise _Never
                hi, i = pat[i], i + 1
            # ``prev`` matched on its own already (wildmatch compares it before seeing the "-")
            if prev <= hi:  # a reversed range adds nothing
                ranges.append((prev, hi))
            prev = None
        elif c == 0x5B and pat.startswith(b":", i + 1):  # "[:class:]"
            end = pat.find(b"]", i + 2)
            if end == -1:
                raise _Never
            if end - 1 >= i + 2 and pat[end - 1] == 0x3A:
                cls = _CLASSES.get(pat[i + 2:end - 1])
                if cls is None:
                    raise _Never
                ranges.extend(cls)
                prev, i = None, end + 1
            else:
                ranges.append((c, c))
                prev, i = c, i + 1
        else:
            ranges.append((c, c))
            prev, i = c, i + 1
    return _char_class(ranges, negated), i + 1


def translate(pat: bytes, *, basename: bool) -> bytes:
    """RE2 source (Latin-1, over bytes) for one pattern body under git's wildmatch with
    WM_PATHNAME; raises ``_Never`` for a pattern that matches nothing. ``basename``: matched
    against a name (no ``/``)."""
    out: list[bytes] = []
    needs = 0  # bytes any match takes: a pattern that needs more than a path has is left out
    i, n = 0, len(pat)
    # git compares the literal head of a pattern itself and hands only the rest to wildmatch,
    # so a "**" right after that head counts as leading: "a**/b" matches "a/x/b".
    head = next((k for k, ch in enumerate(pat) if ch in b"*?[\\"), n)
    while i < n:
        c = pat[i]
        if c == 0x2A:  # "*"
            j = i
            while j < n and pat[j] == 0x2A:
                j += 1
            # "**" is special only as a whole path component; elsewhere it is a plain "*".
            if (j - i > 1 and not basename and (i == head or pat[i - 1] == _SLASH)
                    and (j == n or pat[j] == _SLASH)):
                if j == n:
                    out.append(b".*")
                elif not out or out[-1] != _ANY_DIRS:  # "**/**/" is "**/"
                    out.append(_ANY_DIRS)
                j += j < n
            else:
                out.append(b"[^/]*")
            i = j
            continue
        if c == 0x3F:  # "?": one byte, as in git (a multi-byte character takes several)
            out.append(b"[^/]")
            i += 1
        elif c == 0x5B:
            cls, i = _bracket(pat, i + 1)
            out.append(cls)
        elif c == 0x5C:
            if i + 1 == n:
                raise _Never
            out.append(_byte(pat[i + 1]))
            i += 2
        else:
            out.append(_byte(c))
            i += 1
        needs += 1
        if needs > _LONGEST_PATH:
            raise _Never
    return b"".join(out)


def trim_trailing_spaces(line: bytes) -> bytes:
    """Drop unescaped trailing spaces like git: ``a\\ `` keeps one, a trailing ``\\`` keeps all."""
    body = line.rstrip(b" ")
    if body == line:
        return line
    # the run of backslashes before the spaces pairs up from its start: an odd one escapes the
    # first space
    run = len(body) - len(body.rstrip(b"\\"))
    return body + b" " if run % 2 else body


@dataclass(frozen=True, slots=True)
class Rule:
    source: bytes  # the RE2 expression, matched against the path below the rule file's folder
    negated: bool
    dir_only: bool
    reason: str  # "gitignore" or "ragignore": the skip reason it gives


def parse_lines(data: bytes, reason: str) -> list[Rule]:
    """The rules of one ignore file, in file order; lines that can match nothing are left out."""
    rules: list[Rule] = []
    for raw in data.removeprefix(b"\xef\xbb\xbf").split(b"\n"):
        line = raw.removesuffix(b"\r")
        if not line or line.startswith(b"#"):
            continue
        line = trim_trailing_spaces(line)
        negated = line.startswith(b"!")
        line = line[negated:]
        dir_only = line.endswith(b"/")
        line = line[: len(line) - dir_only]
        if not line:
            continue
        basename = b"/" not in line  # then it matches the last path component at any depth
        try:
            src = translate(line.removeprefix(b"/"), basename=basename)
        except _Never:
            continue
        rules.append(Rule(_ANY_DIRS + src if basename else src, negated, dir_only, reason))
    return rules


def _options() -> re2.Options:
    opts = re2.Options()
    opts.encoding = re2.Options.Encoding.LATIN1  # bytes, as git's wildmatch compares them
    opts.dot_nl = True  # a name may hold a newline
    opts.log_errors = False
    opts.max_mem = _SET_MEMORY
    return opts


def _compile(rules: Sequence[Rule], offset: int = 0) -> list[tuple[re2.Set, int]]:
    """RE2 full-match sets over ``rules`` (one, unless RE2's memory cap forces a split), each
    with the index of its first rule. A single rule too large for RE2 is left out, logged."""
    if not rules:
        return []
    try:
        rule_set = re2.Set.FullMatchSet(_options())
        for rule in rules:
            rule_set.Add(rule.source)
        rule_set.Compile()
        return [(rule_set, offset)]
    except re2.error:
        if len(rules) == 1:
            log.warning("an ignore rule is too large to match and is left out (%d bytes)",
                        len(rules[0].source))
            return []
    half = len(rules) // 2
    return _compile(rules[:half], offset) + _compile(rules[half:], offset + half)


class RuleFile:
    """The rules of one ignore file, tied to its folder (``baselen`` bytes of the top-relative
    path); compiled once per kind of entry, when first asked."""

    __slots__ = ("baselen", "_rules", "_sets")

    def __init__(self, rules: Sequence[Rule], baselen: int) -> None:
        self.baselen = baselen
        # directory-only rules never match a file: files get a set without them
        self._rules = (tuple(r for r in rules if not r.dir_only), tuple(rules))
        self._sets: list[list[tuple[re2.Set, int]] | None] = [None, None]

    def last_match(self, path: bytes, is_dir: bool) -> Rule | None:
        """The rule that decides for ``path`` (top-relative), None when no rule matches."""
        sets = self._sets[is_dir]
        if sets is None:
            sets = self._sets[is_dir] = _compile(self._rules[is_dir])
        sub = path[self.baselen:]
        best = -1
        for rule_set, offset in sets:
            hits = rule_set.Match(sub)
            if hits:
                best = max(best, offset + max(hits))
        return self._rules[is_dir][best] if best >= 0 else None


# Ignore files in precedence order: extra_ignore, then the deepest folder's file first.
Stack = tuple[RuleFile, ...]


def parse_ignore(text: str | bytes, base: str = "", reason: str = "gitignore") -> Stack:
    """The rules of one ignore file whose folder is ``base`` ("" or "dir/", top-relative)."""
    rules = parse_lines(encode(text) if isinstance(text, str) else text, reason)
    return (RuleFile(rules, len(encode(base))),) if rules else ()


def first_match(stack: Stack, path: bytes, is_dir: bool) -> Rule | None:
    """The rule that decides for ``path``: the last matching one of the first file that has one."""
    for rule_file in stack:
        rule = rule_file.last_match(path, is_dir)
        if rule is not None:
            return rule
    return None


def read_ignore_file(path: str, base: str, reason: str) -> Stack:
    """``parse_ignore`` of the file at ``path``; () when it is missing, unreadable or a symlink
    (git refuses to follow a symlinked .gitignore since 2.32; O_NOFOLLOW makes us agree)."""
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb") as fh:
            data = fh.read()
    except OSError:
        return ()
    return parse_ignore(data, base, reason)
