"""``rag_health``: is the index there, fresh and usable? Never fails."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from rag_mcp.deps import Deps
from rag_mcp.errors import IndexUnavailable, RagError
from rag_mcp.index.generation import SCHEMA_VERSION
from rag_mcp.search.fusion import calibration_for
from rag_mcp.search.repos import Repo
from tools._base import ToolSpec

log = logging.getLogger(__name__)

DESCRIPTION = (
    "Check the rag-mcp index: present, how many files and spans, when it was built, how many "
    "files changed since, which model, and whether the optional local LLM is reachable."
)


Status = Literal["ok", "degraded", "unavailable"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RepoHealth:
    name: Annotated[str, Field(description="What rag_query and rag_get_span take as repo")]
    root: str
    status: Status
    message: Annotated[str, Field(description="What to do for this repository, if anything")]
    error_code: Annotated[str | None, Field(
        description="E_INDEX_UNAVAILABLE when it has no usable index")] = None
    index_present: bool
    generation: int | None = None
    files: int = 0
    spans: int = 0
    last_indexed_at: str | None = None
    stale_files: Annotated[int | None, Field(
        description="Files changed since the last index run")] = None
    embedding_model: str | None = None
    index_command: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RagHealthResult:
    status: Status
    message: Annotated[str, Field(description="What to do, if anything")]
    version: str
    root: Annotated[str, Field(description="The (first) served repository root")]
    index_present: bool
    generation: int | None = None
    files: int = 0
    spans: int = 0
    last_indexed_at: str | None = None
    stale_files: Annotated[int | None, Field(
        description="Files changed since the last index run")] = None
    embedding_model: str | None = None
    embedding_backend: str | None = None
    model_loaded: bool = False
    schema_version: int = SCHEMA_VERSION
    index_schema_version: int | None = None
    default_tau: float | None = None
    cache: dict[str, int] = field(default_factory=dict)
    uptime_s: float
    local_llm_enabled: bool
    local_llm_reachable: bool | None = None
    local_llm_model: str | None = None
    index_command: str
    repos: Annotated[list[RepoHealth], Field(
        description="Each served repository; with several, the fields above sum (files, spans, "
                    "stale_files) or take the first usable index (model, tau)")] = field(
        default_factory=list)


#: how old a freshness count health reports as current
FRESH_SECONDS = 2.0


def _index_facts(repo: Repo) -> tuple[dict[str, Any], RagError | None]:
    """What one repository's index says about itself, or why it cannot be opened."""
    try:
        idx = repo.handle.get()
    except RagError as exc:
        return {}, exc
    except Exception:  # health must answer even when something unforeseen broke
        log.exception("rag_health could not open the index of %s", repo.name)
        return {}, IndexUnavailable("the index cannot be opened; see the server log")
    m = idx.manifest
    return {"generation": idx.generation, "files": idx.counts["files"],
            "spans": idx.counts["spans"], "last_indexed_at": m.get("created_at"),
            "embedding_model": m.get("model"), "embedding_backend": m.get("backend"),
            "index_schema_version": m.get("schema_version"),
            "default_tau": calibration_for(str(m.get("model", ""))).tau}, None


def repo_health(repo: Repo) -> tuple[RepoHealth, dict[str, Any]]:
    """One repository's status, and the facts of its index (empty when there is none)."""
    from rag_mcp.index.handle import index_command

    cmd = index_command(repo.settings)
    facts, err = _index_facts(repo)
    if err is not None:
        return RepoHealth(name=repo.name, root=repo.settings.root, status="unavailable",
                          message=err.message, error_code=err.code, index_present=False,
                          index_command=cmd), facts
    stale = repo.freshness.now(FRESH_SECONDS) if repo.freshness is not None else None
    status: Literal["ok", "degraded"] = "degraded" if stale else "ok"
    message = (f"{stale} file(s) changed since the last index run; run `{cmd}`" if stale
               else "ready")
    return RepoHealth(
        name=repo.name, root=repo.settings.root, status=status, message=message,
        index_present=True, generation=facts["generation"], files=facts["files"],
        spans=facts["spans"], last_indexed_at=facts["last_indexed_at"], stale_files=stale,
        embedding_model=facts["embedding_model"], index_command=cmd), facts


def rag_health(deps: Deps) -> RagHealthResult:
    s = deps.settings
    reports = [repo_health(r) for r in deps.repos.values()]
    repos = [h for h, _ in reports]
    usable = [(h, f) for h, f in reports if h.index_present]
    several = len(repos) > 1
    out: dict[str, Any] = {
        "version": deps.version, "root": s.root, "index_present": bool(usable),
        "uptime_s": round(time.monotonic() - deps.started, 1),
        "local_llm_enabled": deps.llm is not None, "cache": deps.queries.cache_stats(),
        "repos": repos, "model_loaded": bool(usable) and bool(deps.models.loaded),
    }
    if usable:
        facts = usable[0][1]
        out.update({k: facts[k] for k in ("embedding_model", "embedding_backend",
                                          "index_schema_version", "default_tau")})
    if not several:
        only, facts = reports[0]
        out.update(index_command=only.index_command, stale_files=only.stale_files,
                   **{k: facts[k] for k in ("generation", "files", "spans", "last_indexed_at")
                      if k in facts})
    else:
        stale = [h.stale_files for h in repos if h.stale_files is not None]
        out.update(files=sum(h.files for h in repos), spans=sum(h.spans for h in repos),
                   stale_files=sum(stale) if stale else None,
                   index_command=" && ".join(h.index_command for h in repos
                                             if h.status != "ok") or repos[0].index_command)
    problems = [f"{h.name}: {h.message}" if several else h.message
                for h in repos if h.status != "ok"]
    statuses = {h.status for h in repos}
    status = ("unavailable" if statuses == {"unavailable"}
              else "ok" if statuses == {"ok"} else "degraded")
    if deps.llm is not None:
        out["local_llm_model"] = deps.llm.default_model
        out["local_llm_reachable"] = deps.llm.reachable()
        if not out["local_llm_reachable"] and status == "ok":
            status = "degraded"
            problems.append(f"local LLM enabled but Ollama does not answer at {deps.llm.host}; "
                            "start it with `ollama serve`")
    out["status"] = status
    out["message"] = "; ".join(problems) if problems else "ready"
    return RagHealthResult(**out)


def render(r: RagHealthResult) -> str:
    lines = [f"rag-mcp {r.version}: {r.status} — {r.message}"]
    if len(r.repos) > 1:
        for h in r.repos:
            state = (f"generation {h.generation}, {h.files:,} files, {h.spans:,} spans, built "
                     f"{h.last_indexed_at}, stale files {h.stale_files}" if h.index_present
                     else f"no usable index: run `{h.index_command}`")
            lines.append(f"repo {h.name} ({h.root}): {h.status} — {state}")
    else:
        lines.append(f"root: {r.root}")
        if r.index_present:
            lines.append(f"index: generation {r.generation}, {r.files:,} files, {r.spans:,} "
                         f"spans, built {r.last_indexed_at}, stale files {r.stale_files}")
    if r.index_present:
        lines.append(f"model: {r.embedding_model} ({r.embedding_backend}), "
                     f"{'loaded' if r.model_loaded else 'not loaded yet'}; tau {r.default_tau}")
    elif len(r.repos) <= 1:
        lines.append(f"no usable index: run `{r.index_command}`")
    lines.append(f"cache: {r.cache}; uptime {r.uptime_s:.0f} s")
    if r.local_llm_enabled:
        lines.append(f"local LLM: {r.local_llm_model}, "
                     f"{'reachable' if r.local_llm_reachable else 'NOT reachable'}")
    return "\n".join(lines)


def log_fields(params: dict[str, Any], r: RagHealthResult | None) -> dict[str, Any]:
    return {"status": r.status} if r is not None else {}


SPEC = ToolSpec(name="rag_health", title="Index health", fn=rag_health,
                result=RagHealthResult, render=render, log_fields=log_fields)
rag_health.__doc__ = DESCRIPTION
