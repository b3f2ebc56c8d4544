"""What an incremental run loads: the model only when a vector is missing, the weights digest once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.embed import Embedder
from rag_mcp.embed import models as embed
from rag_mcp.embed.fake import HashEmbedder
from rag_mcp.errors import InvalidArgument

HASH = "test-hash-64"


def settings_for(root: Path) -> Settings:
    return load_settings({"root": str(root), "embed_model": HASH})


class CountingFactory:
    """The fake model, counting how often (and from which thread) the run asked for it."""

    def __init__(self) -> None:
        self.calls = 0
        self.threads: list[str] = []

    def __call__(self) -> Embedder:
        self.calls += 1
        self.threads.append(threading.current_thread().name)
        return HashEmbedder()


def test_a_run_whose_vectors_are_all_cached_never_loads_the_model(sample_repo: Path) -> None:
    s = settings_for(sample_repo)
    run_index(s)
    target = sample_repo / "src" / "app" / "spans.py"
    original = target.read_text()
    target.write_text(original.replace("return hashlib.sha256(data).hexdigest()",
                                       "return hashlib.sha256(data).hexdigest().upper()"))
    edited = CountingFactory()
    assert run_index(s, embedder_factory=edited).embedded == 1
    assert edited.calls == 1 and edited.threads != [threading.current_thread().name]
    target.write_text(original)  # back: every vector is in the embedding cache
    reverted = CountingFactory()
    stats = run_index(s, embedder_factory=reverted)
    assert stats.published and stats.files_changed == 1 and stats.embedded == 0
    assert reverted.calls == 0


def test_a_model_that_fails_to_load_fails_the_run_and_leaves_no_thread(sample_repo: Path) -> None:
    s = settings_for(sample_repo)
    run_index(s)
    before = run_index(s).generation
    (sample_repo / "src" / "app" / "new.py").write_text("def fresh():\n    return 1\n")

    def broken() -> Embedder:
        raise InvalidArgument("no such model here")

    with pytest.raises(InvalidArgument, match="no such model here"):
        run_index(s, embedder_factory=broken)
    assert not [t for t in threading.enumerate() if t.name == "rag-index-model"]
    assert run_index(s).generation == before + 1  # nothing was published by the failed run


def test_a_run_with_nothing_to_update_loads_no_model_and_no_parser(sample_repo: Path) -> None:
    """A no-op run opens the published generation as a server would (checksums, counts,
    vectors: damage is repaired, not called up to date), but embeds and parses nothing."""
    run_index(settings_for(sample_repo))
    script = (
        "import sys\n"
        "from indexers.cli import main\n"
        f"assert main(['--root', {str(sample_repo)!r}, '--model', {HASH!r}, '-q']) == 0\n"
        "heavy = ('onnxruntime', 'tree_sitter', 'tokenizers', 'torch')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout


def fake_model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "bert"}')
    (folder / "model.safetensors").write_bytes(b"weights" * 1000)
    return folder


def test_the_weights_digest_is_remembered_until_a_file_changes(tmp_path: Path) -> None:
    model, cache = fake_model(tmp_path / "model"), tmp_path / "cache"
    first = embed.weights_digest(model, cache)
    assert first == embed.weights_digest(model)  # the same digest as without a memo
    memo = cache / embed.DIGEST_MEMO
    entries = json.loads(memo.read_text())
    assert list(entries.values()) == [first]
    # the memo is what answers while the files' stat is unchanged...
    memo.write_text(json.dumps({k: "0" * 64 for k in entries}))
    assert embed.weights_digest(model, cache) == "0" * 64
    # ...and a file rewritten in place, size and mtime kept, is hashed again
    weights = model / "model.safetensors"
    st = weights.stat()
    weights.write_bytes(b"WEIGHTS" * 1000)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert weights.stat().st_size == st.st_size
    changed = embed.weights_digest(model, cache)
    assert changed not in (first, "0" * 64)
    assert changed == embed.weights_digest(model)


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"k": 5}'])
def test_a_damaged_digest_memo_only_means_hashing_again(tmp_path: Path, content: str) -> None:
    model, cache = fake_model(tmp_path / "model"), tmp_path / "cache"
    cache.mkdir()
    (cache / embed.DIGEST_MEMO).write_text(content)
    assert embed.weights_digest(model, cache) == embed.weights_digest(model)
