"""DokuWiki trees: where a wiki's pages are, their page IDs, and the folders never to index.

A DokuWiki keeps everything under its ``data`` folder: ``pages/`` (the page sources, ``.txt``
in DokuWiki markup, one folder per namespace), ``media/`` (uploads), and state of its own that
is no reading matter: ``attic/`` (old revisions), ``meta/``, ``index/`` (its search index),
``cache/``, ``locks/``, ``tmp/``, ``log/``, ``media_attic/``, ``media_meta/``. The tree is
recognised by that shape, wherever it is: a folder holding ``pages/`` beside at least two of
the state folders that only DokuWiki keeps (attic, meta, index, locks, media_attic, media_meta)
is a data folder (a ``data/`` folder, a whole install, Debian's
``/var/lib/dokuwiki``). A root that is itself a page tree is recognised by its parent (a data
folder), or, when it was copied out on its own, by its content: ``.txt`` files only, named like
page IDs, most of them in DokuWiki markup.

Page IDs follow DokuWiki: ``pages/wiki/syntax.txt`` is ``wiki:syntax``; ``media/wiki/logo.png``
is the media ID ``wiki:logo.png``. Section anchors follow DokuWiki's ``sectionID``:
``indexers.doc_anchors``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

#: the state folders no other kind of project has beside a ``pages/`` (a web app's root may
#: well hold pages/, tmp/ and log/)
_WIKI_ONLY = frozenset("attic index locks meta media_attic media_meta".split())
#: what a data folder holds worth reading
CONTENT_DIRS = frozenset({"pages", "media"})

# DokuWiki markup a page is likely to use: headings, links, media, lists, tables, code, bold
_MARKUP = re.compile(
    r"^ ?={2,}.*={2,}[ \t]*$|\[\[[^\]\n]+\]\]|\{\{[^}\n]+\}\}|^ {2,}[*-] |^[|^].*[|^][ \t]*$|"
    r"<code\b|<file\b|\*\*[^*\n]+\*\*|//[^/\n]+//", re.M)
# a page file name DokuWiki would write (cleanID keeps lowercase letters, digits, _ . -)
_PAGE_NAME = re.compile(r"[^\sA-Z/:;]+\.txt\Z")
_SAMPLE = 30  # page files read to judge a copied-out page tree
_MAX_LISTED = 5000  # files listed to judge it


def is_data_dir(names: set[str] | frozenset[str]) -> bool:
    """Whether a folder with these entries is a DokuWiki data folder."""
    return "pages" in names and len(_WIKI_ONLY.intersection(names)) >= 2


def _names(folder: Path) -> frozenset[str]:
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return frozenset()


def looks_like_page_tree(folder: Path) -> bool:
    """Whether ``folder`` holds DokuWiki pages and nothing else: every file a ``.txt`` named
    like a page ID, and most of a sample written in DokuWiki markup."""
    pages: list[str] = []
    listed = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.startswith("."):
                continue
            listed += 1
            if not _PAGE_NAME.match(name):
                return False
            pages.append(os.path.join(dirpath, name))
        if listed > _MAX_LISTED:
            break
    if not pages:
        return False
    sample = pages[:: max(1, len(pages) // _SAMPLE)][:_SAMPLE]
    marked = 0
    for path in sample:
        try:
            with open(path, "rb") as fh:
                head = fh.read(8192).decode("utf-8", "replace")
        except OSError:
            continue
        marked += _MARKUP.search(head) is not None
    return marked * 2 >= len(sample)


class WikiTrees:
    """Where the DokuWiki page and media trees under one root are (folder verdicts cached)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(os.path.realpath(root))
        self._data: dict[str, bool] = {}
        # The root itself a page (or media) tree: a data folder's pages/ handed over directly,
        # or a page tree copied out on its own.
        self.root_kind = ""
        if self.root.name in CONTENT_DIRS and is_data_dir(_names(self.root.parent)):
            self.root_kind = self.root.name
        elif looks_like_page_tree(self.root):
            self.root_kind = "pages"

    def data_dir(self, d: str, names: set[str] | frozenset[str] | None = None) -> bool:
        """Whether the root-relative folder ``d`` ("" for the root) is a DokuWiki data folder."""
        got = self._data.get(d)
        if got is None:
            if names is None:
                names = _names(self.root / d if d else self.root)
            got = self._data[d] = is_data_dir(names)
        return got

    def state_reason(self, parent: str, name: str,
                     names: set[str] | frozenset[str] | None = None) -> str | None:
        """``"wiki_state"`` for an entry of a data folder other than pages/ and media/."""
        if name in CONTENT_DIRS or not self.data_dir(parent, names):
            return None
        return "wiki_state"

    def _tree_of(self, rel: str) -> tuple[str, str] | None:
        """``(kind, path inside the tree)`` of a root-relative file in a page or media tree."""
        parts = rel.split("/")
        for i in range(len(parts) - 2, -1, -1):
            if parts[i] in CONTENT_DIRS and self.data_dir("/".join(parts[:i])):
                return parts[i], "/".join(parts[i + 1:])
        if self.root_kind:
            return self.root_kind, rel
        return None

    def page_id(self, rel: str) -> str:
        """``wiki:syntax`` for ``.../pages/wiki/syntax.txt``; "" for anything else."""
        got = self._tree_of(rel)
        if got is None or got[0] != "pages" or not got[1].endswith(".txt"):
            return ""
        return got[1][: -len(".txt")].replace("/", ":")

    def media_id(self, rel: str) -> str:
        """``wiki:manual.pdf`` for ``.../media/wiki/manual.pdf``; "" for anything else."""
        got = self._tree_of(rel)
        return got[1].replace("/", ":") if got is not None and got[0] == "media" else ""
