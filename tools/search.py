"""``search``: OpenAI's connector and deep-research search tool over ``rag_query``.

ChatGPT connectors and deep research call a tool named ``search`` with one ``query`` string and
read exactly one text content item whose text is the JSON object ``{"results": [{"id", "title",
"url"}]}`` (https://platform.openai.com/docs/mcp, "search tool"; docs/CLIENTS.md). The IDs are
our span IDs, which ``fetch`` accepts; the URL is the span's page on the wiki or docs site when
``links.*`` configures one (``rag_mcp.search.links``), else a web permalink of its lines
(``tools/_links.py``), else empty: never a ``file://`` link, which opens nothing for ChatGPT.
When the server serves several repositories an ID names its repository first,
``repo:path:start-end:digest`` (repository names hold no ':').
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Annotated, Any

from pydantic import Field

from rag_mcp.config import Settings
from rag_mcp.deps import Deps
from rag_mcp.search.records import QueryParams
from rag_mcp.search.redact import redact_label
from rag_mcp.search.repos import qualify
from tools import _links
from tools._base import ToolSpec

DESCRIPTION = (
    "Search this repository's code and docs. Returns JSON {\"results\": [{\"id\", \"title\", "
    "\"url\"}]}, best first; pass an id to fetch to read that span."
)


@dataclass(frozen=True, slots=True)
class SearchItem:
    id: Annotated[str, Field(description="Span ID 'path:start-end:digest' (with several "
                                         "repositories 'repo:path:start-end:digest'); pass it "
                                         "to fetch")]
    title: Annotated[str, Field(description="Symbol or heading, then path and lines")]
    url: Annotated[str, Field(description="Web link for a citation: the wiki or docs page when "
                                          "that site is configured, else a forge permalink to "
                                          "the lines, or empty when the repository has none")]


@dataclass(frozen=True, slots=True)
class SearchResult:
    results: Annotated[list[SearchItem], Field(description="Best first")]


def span_url(settings: Settings, path: str, start: int, end: int) -> str:
    """The citable web URL of lines ``start``-``end`` of ``path`` in the repository of
    ``settings`` (``http.url_template``; tools/_links.py), or "" when there is none."""
    return _links.span_url(settings.url_template, settings.root, path, start, end)


def span_title(path: str, start: int, end: int, label: str | None) -> str:
    where = f"{path}:{start}-{end}"
    return f"{label} ({where})" if label else where


def search(
    deps: Deps,
    query: Annotated[str, Field(
        description="What to look for: a question, a behaviour, or identifiers from the code",
        min_length=1, max_length=8192)],
) -> SearchResult:
    ans = deps.queries.query(QueryParams(query=query, k=deps.settings.k))
    # fetch takes nothing but the id: with several repositories it must name its repository.
    return SearchResult(results=[
        SearchItem(id=qualify(h.repo, h.id) if deps.multi else h.id,
                   title=span_title(h.path, h.start_line, h.end_line,
                                    redact_label(h.symbol or h.heading)
                                    or h.preview[:120] or None),
                   url=h.url or span_url(deps.repos[h.repo].settings, h.path, h.start_line,
                                h.end_line))
        for h in ans.hits])


def render(r: SearchResult) -> str:
    # The contract is the JSON itself: the connector parses this one text item.
    return json.dumps(asdict(r), ensure_ascii=False)


def log_fields(params: dict[str, Any], r: SearchResult | None) -> dict[str, Any]:
    return {"returned": len(r.results)} if r is not None else {}


SPEC = ToolSpec(name="search", title="Search (ChatGPT connectors)", fn=search,
                result=SearchResult, render=render, log_fields=log_fields)
search.__doc__ = DESCRIPTION
