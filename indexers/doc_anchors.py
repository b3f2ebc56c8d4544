"""Section anchors as the sites that publish a page compute them, so a hit can link to its
section: DokuWiki's ``sectionID``, Python-Markdown's ``toc`` slugs (MkDocs) and docutils'
``make_id`` (Sphinx).

Each function takes a heading title and the anchors already given on the page (``seen``,
updated), and returns the anchor the site gives the next heading with that title.
"""

from __future__ import annotations

import re
import unicodedata

# --- DokuWiki (inc/pageutils.php: sectionID, cleanID; inc/Utf8/Clean.php)

# Clean::deaccent's lower-case table where it is more than dropping the accent (NFD does the
# rest: é -> e); German umlauts become two letters, as in DokuWiki's page names.
_DW_DEACCENT = {
    "ä": "ae", "ö": "oe", "ü": "ue", "ß": "ss", "æ": "ae", "ð": "dh", "þ": "th", "đ": "d",
    "ƒ": "f", "ħ": "h", "ı": "i", "ł": "l", "ø": "o", "ŧ": "t", "µ": "u",
}
_DW_KEEP = frozenset("_:.-")


def _dw_special(c: str) -> bool:
    """Clean::stripspecials' table: punctuation, symbols, spaces, controls and number signs
    such as ``½``, but ``_ : . -``
    (its table lists these by code point; the Unicode categories give the same for the
    characters headings use)."""
    cat = unicodedata.category(c)
    return c not in _DW_KEEP and (cat[0] in "PSZC" or cat == "No")


def dokuwiki_clean_id(raw: str) -> str:
    """DokuWiki's ``cleanID`` with the default configuration (sepchar ``_``, deaccent 1)."""
    s = raw.strip().lower().replace(";", ":").replace("/", "_")
    s = "".join(_DW_DEACCENT.get(c) or c for c in s)
    s = "".join(c for c in unicodedata.normalize("NFD", s) if not unicodedata.combining(c))
    s = "".join("_" if c == "*" or _dw_special(c) else c for c in s)
    s = re.sub(r"_+", "_", s)
    s = re.sub(r":+", ":", s)
    s = s.strip(":._-")
    s = re.sub(r":[:._-]+", ":", s)
    return re.sub(r"[:._-]+:", ":", s)


def dokuwiki_section_id(title: str, seen: list[str]) -> str:
    """DokuWiki's ``sectionID``: the clean ID without ``:`` and ``.``, leading digits, ``_``
    and ``-`` dropped (``section<digits>`` if nothing is left), ``1``, ``2``... for repeats."""
    anchor = dokuwiki_clean_id(title).replace(":", "").replace(".", "")
    rest = anchor.lstrip("0123456789_-")
    anchor = rest or "section" + re.sub(r"[^0-9]+", "", anchor)
    candidate, n = anchor, 0
    while candidate in seen:
        n += 1
        candidate = f"{anchor}{n}"
    seen.append(candidate)
    return candidate


# --- Markdown: Python-Markdown's toc extension, which MkDocs uses

_MD_INLINE = re.compile(r"!?\[([^\]]*)\]\([^)]*\)|[`*_~]|<[^>]+>")
_MD_COUNT = re.compile(r"^(.*)_([0-9]+)$")


def markdown_slug(title: str, seen: list[str]) -> str:
    """The ``id`` Python-Markdown's toc gives a heading (MkDocs' section anchors): inline
    markup dropped, ASCII only, lower case, runs of spaces and hyphens as one ``-``;
    ``_1``, ``_2``... for repeats."""
    text = _MD_INLINE.sub(lambda m: m.group(1) or "", title)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    slug = re.sub(r"[-\s]+", "-", text)
    while slug in seen or not slug:
        m = _MD_COUNT.match(slug)
        slug = f"{m.group(1)}_{int(m.group(2)) + 1}" if m else f"{slug}_1"
    seen.append(slug)
    return slug


# --- reStructuredText: docutils' make_id, which Sphinx uses for section ids


def rst_id(title: str, seen: list[str]) -> str:
    """docutils' ``make_id`` of a section title (a repeated title gets no unique id here:
    docutils numbers those ``id1``, ``id2`` across the whole document)."""
    text = unicodedata.normalize("NFKD", title.lower()).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^a-z0-9]+", "-", " ".join(text.split()))
    anchor = re.sub(r"^[-0-9]+|-+$", "", text)
    seen.append(anchor)
    return anchor


ANCHORS = {"dokuwiki": dokuwiki_section_id, "markdown": markdown_slug, "rst": rst_id}
