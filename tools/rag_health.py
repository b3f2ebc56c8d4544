"""``rag_health``: is the index there, fresh and usable? Never fails."""

from __future__ import annotations

import logging
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

from rag_mcp.deps import Deps
from rag_mcp.errors import RagError
from rag_mcp.fusion import calibration_for
from rag_mcp.generation import SCHEMA_VERSION
from tools._base import ToolSpec

log = logging.getLogger(__name__)

DESCRIPTION = (
    "Check the rag-mcp index: present, how many files and spans, when it was built, how many "
    "files changed since, which model, and whether the optional local LLM is reachable."
)


class RagHealthResult(BaseModel):
    status: Literal["ok", "degraded", "unavailable"]
    message: str = Field(description="What to do, if anything")
    version: str
    root: str
    index_present: bool
    generation: int | None = None
    files: int = 0
    spans: int = 0
    last_indexed_at: str | None = None
    stale_files: int | None = Field(None, description="Files changed since the last index run")
    embedding_model: str | None = None
    embedding_backend: str | None = None
    model_loaded: bool = False
    schema_version: int = SCHEMA_VERSION
    index_schema_version: int | None = None
    default_tau: float | None = None
    cache: dict[str, int] = Field(default_factory=dict)
    uptime_s: float
    local_llm_enabled: bool
    local_llm_reachable: bool | None = None
    local_llm_model: str | None = None
    index_command: str


def rag_health(deps: Deps) -> RagHealthResult:
    from rag_mcp.index import index_command

    s = deps.settings
    out: dict[str, Any] = {
        "version": deps.version, "root": s.root, "index_present": False,
        "uptime_s": round(time.monotonic() - deps.started, 1),
        "local_llm_enabled": deps.llm is not None, "index_command": index_command(s),
        "cache": deps.queries.cache_stats(),
    }
    problems: list[str] = []
    status = "ok"
    try:
        idx = deps.handle.get()
        m = idx.manifest
        out.update(
            index_present=True, generation=idx.generation, files=idx.counts["files"],
            spans=idx.counts["spans"], last_indexed_at=m.get("created_at"),
            embedding_model=m.get("model"), embedding_backend=m.get("backend"),
            index_schema_version=m.get("schema_version"),
            default_tau=calibration_for(str(m.get("model", ""))).tau,
            model_loaded=bool(deps.models.loaded),
        )
    except RagError as exc:
        status = "unavailable"
        problems.append(exc.message)
    except Exception:  # health must answer even when something unforeseen broke
        log.exception("rag_health could not open the index")
        status = "unavailable"
        problems.append("the index cannot be opened; see the server log")
    if out["index_present"] and deps.freshness is not None:
        stale = deps.freshness.now()
        out["stale_files"] = stale
        if stale:
            status = "degraded"
            problems.append(f"{stale} file(s) changed since the last index run; run "
                            f"`{out['index_command']}`")
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
    lines = [f"rag-mcp {r.version}: {r.status} — {r.message}", f"root: {r.root}"]
    if r.index_present:
        lines.append(f"index: generation {r.generation}, {r.files:,} files, {r.spans:,} spans, "
                     f"built {r.last_indexed_at}, stale files {r.stale_files}")
        lines.append(f"model: {r.embedding_model} ({r.embedding_backend}), "
                     f"{'loaded' if r.model_loaded else 'not loaded yet'}; tau {r.default_tau}")
    else:
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
