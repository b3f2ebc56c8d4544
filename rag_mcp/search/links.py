"""Where a span is for a reader: DokuWiki page ID, section anchor, PDF page, and a web URL.

The indexer records a span's page ID, anchor and page in its ``meta``; the URL is built here
from the settings (``links.*``), so changing the site's address needs no re-index:

- a DokuWiki page with ``links.wiki_url`` (``https://wiki.example.org/doku.php``):
  ``…doku.php?id=<page_id>#<anchor>``; a URL that does not end in ``doku.php`` is a wiki with
  rewritten URLs: ``<wiki_url>/<page_id>#<anchor>``. A file in the wiki's media folder links
  to ``lib/exe/fetch.php?media=<media_id>`` beside ``doku.php``;
- a file under ``links.docs_dir`` with ``links.docs_url``: the page the docs site builds from
  it (``links.docs_style``: MkDocs directory URLs or ``.html`` pages) plus the anchor;
- a PDF page is added as ``#page=N`` (the PDF open parameter browsers honour).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from rag_mcp.config import Settings
from rag_mcp.index.spans import Span

_DOC_SUFFIXES = (".md", ".markdown", ".mdx", ".rst", ".rest", ".txt", ".ipynb")
_INDEX_PAGES = ("index", "readme")


@dataclass(frozen=True, slots=True)
class Where:
    page_id: str | None = None
    anchor: str | None = None
    page: int | None = None
    url: str | None = None


def _fragment(anchor: str | None, page: int | None) -> str:
    if anchor:
        return "#" + quote(anchor, safe="")
    return f"#page={page}" if page else ""


def wiki_page_url(wiki_url: str, page_id: str) -> str:
    """The URL of a DokuWiki page (without a fragment)."""
    pid = quote(page_id, safe=":")
    if "?" in wiki_url:
        return f"{wiki_url}&id={pid}"
    if wiki_url.rstrip("/").endswith(".php"):
        return f"{wiki_url}?id={pid}"
    return f"{wiki_url.rstrip('/')}/{pid}"


def wiki_media_url(wiki_url: str, media_id: str) -> str:
    """The URL DokuWiki serves a media file at (``lib/exe/fetch.php`` beside ``doku.php``)."""
    base = wiki_url.split("?", 1)[0].rstrip("/")
    if base.endswith(".php"):
        base = base.rsplit("/", 1)[0]
    return f"{base}/lib/exe/fetch.php?media={quote(media_id, safe=':')}"


def docs_page_url(settings: Settings, path: str) -> str | None:
    """The docs site's page for a source file under ``links.docs_dir``, else None."""
    folder = settings.docs_dir.strip("/")
    if folder and not path.startswith(folder + "/"):
        return None
    rel = path[len(folder) + 1:] if folder else path
    base = settings.docs_url.rstrip("/") + "/"
    low = rel.lower()
    if low.endswith(".pdf"):
        return base + quote(rel)
    if not low.endswith(_DOC_SUFFIXES):
        return None
    stem = rel.rsplit(".", 1)[0]
    head, _, name = stem.rpartition("/")
    if settings.docs_style == "html":
        return base + quote(stem + ".html")
    if name.lower() in _INDEX_PAGES:  # MkDocs: index.md (or README.md) is the folder's page
        return base + quote(head + "/" if head else "")
    return base + quote(stem + "/")


def where(settings: Settings, span: Span) -> Where:
    """The reader's coordinates of ``span`` and, when the settings know the site, its URL."""
    meta = dict(span.meta)
    page_id = meta.get("page_id") or None
    anchor = meta.get("anchor") or None
    page = int(meta["page"]) if meta.get("page", "").isdigit() else None
    url: str | None = None
    if settings.wiki_url and page_id:
        url = wiki_page_url(settings.wiki_url, page_id)
    elif settings.wiki_url and meta.get("media_id"):
        url = wiki_media_url(settings.wiki_url, meta["media_id"])
    elif settings.docs_url:
        url = docs_page_url(settings, span.path)
    if url is not None:
        url += _fragment(anchor, page)
    return Where(page_id=page_id, anchor=anchor, page=page, url=url)


def describe(page_id: str | None, anchor: str | None, page: int | None,
             url: str | None) -> str:
    """One line for a text rendering: ``wiki:syntax#tables  https://…`` or ``PDF page 3``."""
    parts = []
    if page_id:
        parts.append(f"page {page_id}" + (f"#{anchor}" if anchor else ""))
    elif anchor:
        parts.append(f"#{anchor}")
    if page:
        parts.append(f"PDF page {page}")
    if url:
        parts.append(url)
    return "  ".join(parts)
