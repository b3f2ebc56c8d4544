"""What a generation's manifest records about the run that wrote it, and when it is extendable.

The manifest (``manifest.json``, written last) is the index's contract: chunker, embedding model
and its vectors' identity, settings, vector store, counts. A run extends the previous generation
only when every part of that contract still holds; otherwise it rebuilds and says why.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from hashlib import sha1
from pathlib import Path
from typing import Any

from indexers import chunking
from indexers.changes import ChangeSet, SkippedFiles
from rag_mcp.config import Settings
from rag_mcp.embed import BUNDLED
from rag_mcp.index import generation as gen
from rag_mcp.index.lexical import TOKENS_VERSION
from rag_mcp.index.spans import EMBED_TEXT_VERSION

#: what the generation's ``pages/`` index holds (bumped when that changes: a generation without
#: it, or with another, is rebuilt; vectors come back from the embedding cache)
PAGES_VERSION = 1


def incompatible(manifest: dict[str, Any], settings: Settings, identity: str,
                 store_kind: str) -> str:
    """Why the base generation cannot be extended ("" when it can)."""
    if manifest.get("chunker_version") != chunking.CHUNKER_VERSION:
        return "the chunker changed"
    if manifest.get("embed_text_version", "1") != EMBED_TEXT_VERSION:
        return "the text the model reads for a span changed"
    if manifest.get("model_identity") != identity:
        same_model = (manifest.get("model"), manifest.get("backend")) == (
            settings.embed_model, settings.embed_backend)
        if same_model and manifest.get("embed_max_tokens", 0) != settings.embed_max_tokens:
            return f"embed.max_tokens changed to {settings.embed_max_tokens}"
        if same_model:  # new weights, or a new release computes this backend's vectors anew
            return (f"the vectors of {settings.embed_model} ({settings.embed_backend}) changed "
                    "(its weights or how this version computes them)")
        was = f" from {manifest.get('model')}" if manifest.get("model") else ""
        why = (" (the default model of this release; embed.model keeps the old one)"
               if settings.embed_model == BUNDLED else "")
        return (f"the embedding model changed{was} to {settings.embed_model} "
                f"({settings.embed_backend}){why}")
    if manifest.get("pages_version") != PAGES_VERSION:
        return "pages of prose get a keyword index of their own (no vector is computed again)"
    if manifest.get("tokens_version", 1) != TOKENS_VERSION:
        return "words of every script are indexed as keywords (no vector is computed again)"
    if manifest.get("config_hash") != settings.index_config_hash():
        return "index settings changed"
    if manifest.get("store") != store_kind:
        return "the vector store changed"
    return ""


def vector_collection(settings: Settings, identity: str) -> str:
    # One collection per model: a Chroma collection has one dimension, and a server shared by
    # readers of the previous generation must keep that model's vectors until they move on.
    return f"{settings.collection_name}-v{sha1(identity.encode()).hexdigest()[:8]}"


def skipped_total(cs: ChangeSet, skipped_files: SkippedFiles) -> Counter[str]:
    """Skips by reason: path rules of the walk plus content skips of files still present."""
    return cs.skipped_paths + Counter(reason for _, _, reason in skipped_files.values())


def build(settings: Settings, *, identity: str, store_kind: str, generation: int, dim: int,
          counts: dict[str, Any], vectors: int, orphans: list[str], cs: ChangeSet,
          skipped_files: SkippedFiles, run: dict[str, Any]) -> dict[str, Any]:
    """The manifest of a generation about to be published (checksums are added last)."""
    s = settings
    return {
        "schema_version": gen.SCHEMA_VERSION,
        "chunker_version": chunking.CHUNKER_VERSION,
        "embed_text_version": EMBED_TEXT_VERSION,
        "pages_version": PAGES_VERSION,
        "tokens_version": TOKENS_VERSION,
        "model": s.embed_model,
        "backend": s.embed_backend,
        "model_identity": identity,
        "dim": dim,
        "embed_max_tokens": s.embed_max_tokens,
        "config_hash": s.index_config_hash(),
        "generation": generation,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "created_ts": time.time(),
        "root": s.root,
        "collection": s.collection_name,
        "vector_collection": vector_collection(s, identity),
        "store": store_kind,
        "git_head": git_head(Path(s.root)),
        "files": counts["files"],
        "spans": counts["spans"],
        "vectors": vectors,
        "by_language": counts["by_language"],
        "by_kind": counts["by_kind"],
        "skipped": dict(skipped_total(cs, skipped_files)),
        "skipped_paths": dict(cs.skipped_paths),
        "skipped_files": {k: list(v) for k, v in sorted(skipped_files.items())},
        "fallback": counts["fallback"],
        "orphans": orphans,
        "run": {k: v for k, v in run.items()
                if k not in ("by_language", "by_kind", "skipped", "fallback")},
    }


def git_head(root: Path) -> str | None:
    """The current commit of a git checkout, for the manifest; None outside git."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
