"""``fetch``: OpenAI's connector and deep-research fetch tool over ``rag_get_span``.

The contract (https://platform.openai.com/docs/mcp, "fetch tool"; docs/CLIENTS.md): one ``id``
string from ``search``, and exactly one text content item whose text is the JSON object
``{"id", "title", "text", "url", "metadata"}``. With several repositories served, ``search``
ids are ``repo:path:start-end:digest``, since the contract has no other argument to say which
repository; a bare span ID is looked up in every repository. The text is the span as it is on
disk now, redacted and capped at the response budget, exactly as ``rag_get_span`` returns it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Annotated, Any

from pydantic import Field

from rag_mcp.deps import Deps
from rag_mcp.index.spans import MAX_ID_LEN
from rag_mcp.search.redact import redact_id
from rag_mcp.search.repos import MAX_NAME, qualify, split_qualified
from tools._base import ToolSpec
from tools.search import span_title, span_url

DESCRIPTION = (
    "Read one search result by its id: the span's current text (secrets redacted, size capped) "
    "as JSON {\"id\", \"title\", \"text\", \"url\", \"metadata\"}."
)


@dataclass(frozen=True, slots=True)
class FetchResult:
    id: Annotated[str, Field(description="The id that was asked for")]
    title: str
    text: Annotated[str, Field(
        description="The span's lines as they are now (redacted, capped)")]
    url: Annotated[str, Field(description="Web link for a citation: the wiki or docs page when "
                                          "that site is configured, else a forge permalink to "
                                          "the lines, or empty when the repository has none")]
    metadata: Annotated[dict[str, str], Field(
        description="path, lines, kind, language, symbol or heading, wiki page_id, anchor, "
                    "PDF page, and whether the span moved (current_id), was truncated or had "
                    "secrets redacted")]


def fetch(
    deps: Deps,
    id: Annotated[str, Field(  # noqa: A002 - the contract names the argument `id`
        description="A result id from search (a span ID 'path:start-end:digest', or "
                    "'repo:path:start-end:digest' when several repositories are served)",
        min_length=1, max_length=MAX_ID_LEN + MAX_NAME + 1)],
) -> FetchResult:
    repo, span_id = split_qualified(list(deps.repos), id) if deps.multi else (None, id)
    r = deps.find_span(span_id, repo)
    meta = {"path": r.path, "start_line": str(r.start_line), "end_line": str(r.end_line),
            "kind": r.kind, "language": r.language, "symbol": r.symbol or "",
            "heading": r.heading or "", "stale": str(r.stale).lower(),
            "truncated": str(r.truncated).lower(), "redactions": str(r.redactions),
            "page_id": r.page_id or "", "anchor": r.anchor or "",
            "page": str(r.page) if r.page else ""}
    if deps.multi:
        meta["repo"] = r.repo
    if r.id != redact_id(span_id):  # IDs come back with a secret in the path masked
        meta["current_id"] = qualify(r.repo, r.id) if deps.multi else r.id
    return FetchResult(id=redact_id(id), title=span_title(r.path, r.start_line, r.end_line,
                                               r.symbol or r.heading),
                       text=r.text, url=r.url or span_url(deps.repos[r.repo].settings, r.path,
                                                 r.start_line, r.end_line),
                       metadata={k: v for k, v in meta.items() if v != ""})


def render(r: FetchResult) -> str:
    # The contract is the JSON itself: the connector parses this one text item.
    return json.dumps(asdict(r), ensure_ascii=False)


def log_fields(params: dict[str, Any], r: FetchResult | None) -> dict[str, Any]:
    out: dict[str, Any] = {"span_id": str(params.get("id", ""))[:300]}
    if r is not None:
        out.update(stale=r.metadata.get("stale") == "true",
                   truncated=r.metadata.get("truncated") == "true",
                   redactions=int(r.metadata.get("redactions", "0")))
    return out


SPEC = ToolSpec(name="fetch", title="Fetch (ChatGPT connectors)", fn=fetch,
                result=FetchResult, render=render, log_fields=log_fields)
fetch.__doc__ = DESCRIPTION
