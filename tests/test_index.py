"""The indexer end to end on small repositories (fast deterministic model, real everything else)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from indexers import chunking
from indexers.cli import main as rag_index
from indexers.pipeline import run_index
from indexers.status import index_status, list_spans
from rag_mcp.config import Settings, load_settings
from rag_mcp.index import generation as gen
from rag_mcp.index.catalog import Catalog
from rag_mcp.index.spans import EMBED_TEXT_VERSION, digest, span_text, split_lines

HASH = "test-hash-64"


def settings_for(root: Path, **kw: object) -> Settings:
    return load_settings({"root": str(root), "embed_model": HASH, **kw})


def spans_by_path(s: Settings) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in list_spans(s, None):
        out.setdefault(r["path"], []).append(r)
    return out


def test_index_then_status_and_spans(sample_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert rag_index(["--root", str(sample_repo), "--model", HASH, "-q"]) == 0
    assert rag_index(["--root", str(sample_repo), "--model", HASH, "--status", "--json"]) == 0
    st = orjson.loads(capsys.readouterr().out)
    for key in ("root", "files", "spans", "by_language", "by_kind", "skipped", "model",
                "last_indexed_at", "stale_files"):
        assert key in st
    assert st["files"] == 5 and st["stale_files"] == 0 and st["model"] == HASH
    assert st["by_language"]["python"] >= 4 and st["by_kind"]["doc"] >= 3
    assert rag_index(["--root", str(sample_repo), "--model", HASH, "--spans",
                      str(sample_repo / "src/app/spans.py"), "--json"]) == 0
    rows = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    symbols = {r["symbol"] for r in rows}
    assert {"parse_span_id", "HTTPError", "HTTPError.__init__", "checksum"} <= symbols
    for r in rows:
        assert {"id", "path", "start_line", "end_line", "kind", "language", "symbol"} <= set(r)


def test_a_reader_that_stops_early_is_no_error(sample_repo: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`rag-index --spans --json | head`: a closed pipe ends the listing quietly, exit 0 (a
    BrokenPipeError is an OSError, which must not be taken for a failure to write the index)."""
    assert rag_index(["--root", str(sample_repo), "--model", HASH, "-q"]) == 0

    class ClosedPipe:
        def write(self, _text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert rag_index(["--root", str(sample_repo), "--model", HASH, "--spans", "--json"]) == 0


def test_ids_are_the_exact_text_digests_and_cover_the_files(sample_repo: Path) -> None:
    s = settings_for(sample_repo)
    run_index(s)
    for path, rows in spans_by_path(s).items():
        lines = split_lines((sample_repo / path).read_text())
        covered: set[int] = set()
        for r in rows:
            assert r["id"].endswith(digest(span_text(lines, r["start_line"], r["end_line"])))
            covered.update(range(r["start_line"], r["end_line"] + 1))
        assert all(i + 1 in covered for i, line in enumerate(lines) if line.strip()), path


def test_reindex_unchanged_is_a_noop_with_identical_ids(sample_repo: Path) -> None:
    s = settings_for(sample_repo)
    first = run_index(s)
    before = spans_by_path(s)
    again = run_index(s)
    assert not again.published and again.generation == first.generation
    assert again.embedded == 0 and spans_by_path(s) == before
    os.utime(sample_repo / "README.txt")  # new mtime, same content: no re-embedding
    touched = run_index(s)
    assert touched.embedded == 0 and touched.files_changed == 0
    assert spans_by_path(s) == before


def test_editing_one_function_changes_only_its_span(sample_repo: Path) -> None:
    s = settings_for(sample_repo)
    run_index(s)
    before = {r["symbol"]: r for r in spans_by_path(s)["src/app/spans.py"]}
    path = sample_repo / "src/app/spans.py"
    line = '    path, rng, _digest = span_id.rsplit(":", 2)\n'
    path.write_text(path.read_text().replace(
        line, "    # IDs may contain colons in the path\n" + line))
    stats = run_index(s)
    after = {r["symbol"]: r for r in spans_by_path(s)["src/app/spans.py"]}
    assert stats.embedded == 1  # only the edited function reaches the model
    assert after["parse_span_id"]["id"] != before["parse_span_id"]["id"]
    for sym in ("HTTPError", "checksum"):  # moved down one line, same text, same digest
        assert after[sym]["start_line"] == before[sym]["start_line"] + 1
        assert after[sym]["id"].rsplit(":", 1)[1] == before[sym]["id"].rsplit(":", 1)[1]
    for p, rows in spans_by_path(s).items():
        if p != "src/app/spans.py":
            assert rows == spans_by_path(s)[p]


def test_add_delete_rename(sample_repo: Path) -> None:
    s = settings_for(sample_repo)
    run_index(s)
    (sample_repo / "src/app/new.py").write_text("def brand_new():\n    return 42\n")
    (sample_repo / "README.txt").unlink()
    os.rename(sample_repo / "src/app/retry.py", sample_repo / "src/app/backoff.py")
    stats = run_index(s)
    paths = set(spans_by_path(s))
    assert "src/app/new.py" in paths and "src/app/backoff.py" in paths
    assert "README.txt" not in paths and "src/app/retry.py" not in paths
    assert stats.files_deleted == 2 and stats.files_changed == 2
    assert index_status(s)["stale_files"] == 0


def test_ignored_and_secret_files_are_never_stored(make_repo: Callable[..., Path]) -> None:
    root = make_repo({
        "app.py": "def main():\n    return 1\n",
        ".gitignore": "build/\n*.log\n",
        "build/gen.py": "def generated():\n    pass\n",
        "debug.log": "password=hunter2\n",
        ".env": "API_KEY=sk-live-should-never-be-indexed\n",
        "keys/id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n"
                       "-----END OPENSSH PRIVATE KEY-----\n",
        "node_modules/x/index.js": "module.exports = 1\n",
    })
    s = settings_for(root)
    stats = run_index(s)
    assert set(spans_by_path(s)) == {"app.py", ".gitignore"}
    assert stats.skipped["secret"] == 2
    pointer = gen.read_pointer(s.index_path)
    assert pointer is not None
    raw = b"".join(p.read_bytes() for p in pointer.dir.rglob("*") if p.is_file())
    assert b"should-never-be-indexed" not in raw and b"OPENSSH" not in raw


def test_another_index_inside_the_repository_is_never_indexed(
        make_repo: Callable[..., Path]) -> None:
    root = make_repo({"app.py": "def main():\n    return 1\n",
                      "docs/guide.md": "# Guide\n\nRun the app with main().\n"})
    # an earlier run kept its index in a folder of the repository, not in .rag
    first = settings_for(root, index_dir="old-index")
    run_index(first)
    s = settings_for(root)
    stats = run_index(s)
    assert set(spans_by_path(s)) == {"app.py", "docs/guide.md"}
    assert stats.skipped["build_output"] == 1  # the tagged folder, pruned whole
    tag = (first.index_path / gen.CACHE_TAG).read_bytes()
    assert tag.startswith(b"Signature: 8a477f597d28d172789f06886806bc55\n")  # the standard's
    assert (s.index_path / gen.CACHE_TAG).read_bytes() == tag
    run_index(s)  # the tag is written once and left alone
    assert (s.index_path / gen.CACHE_TAG).read_bytes() == tag


def test_model_change_rebuilds_cleanly(sample_repo: Path) -> None:
    s = settings_for(sample_repo)
    run_index(s)
    s2 = settings_for(sample_repo, chunk_chars="900")
    stats = run_index(s2)
    assert stats.rebuilt == "index settings changed" and stats.published
    pointer = gen.read_pointer(s2.index_path)
    assert pointer is not None
    cat = Catalog(pointer.dir / gen.CATALOG, readonly=True)
    assert cat.counts()["spans"] == stats.spans_total
    cat.close()


def test_reading_spans_to_fewer_tokens_embeds_them_again(sample_repo: Path) -> None:
    s = settings_for(sample_repo)
    first = run_index(s)
    s2 = settings_for(sample_repo, embed_max_tokens="16")
    stats = run_index(s2)
    assert stats.rebuilt == "embed.max_tokens changed to 16"
    assert stats.embedded == stats.spans_total == first.spans_total  # new vectors, same spans
    st = index_status(s2)
    assert st["embed_max_tokens"] == 16
    assert run_index(s2).embedded == 0


def _rebuilt_after_manifest_edit(s: Settings, edit: Callable[[dict], None]) -> str:
    """Index, change the published manifest with ``edit``, index again: the rebuild reason (the
    spans must come back the same and a third run must extend the rebuilt index)."""
    first = run_index(s)
    pointer = gen.read_pointer(s.index_path)
    assert pointer is not None
    manifest = gen.read_manifest(pointer.dir)
    edit(manifest)
    (pointer.dir / gen.MANIFEST).write_bytes(orjson.dumps(manifest))
    stats = run_index(s)
    assert stats.published and stats.spans_total == first.spans_total
    assert run_index(s).rebuilt == ""
    return stats.rebuilt


def test_an_index_embedded_from_another_text_form_is_rebuilt(sample_repo: Path) -> None:
    # An index built before EMBED_TEXT_VERSION 2 has no version in its manifest: its vectors
    # were made from text the model no longer reads, so extending it would mix two forms.
    def drop_version(manifest: dict) -> None:
        assert manifest.pop("embed_text_version") == EMBED_TEXT_VERSION

    why = _rebuilt_after_manifest_edit(settings_for(sample_repo), drop_version)
    assert why == "the text the model reads for a span changed"


def test_an_index_whose_vectors_were_computed_differently_is_rebuilt(sample_repo: Path) -> None:
    # Same model, backend and reading, another identity: new weights, or a release whose export
    # or quantization gives other vectors (the int8 family's version). Nothing may be reused.
    def older_release(manifest: dict) -> None:
        manifest["model_identity"] += "-previous-release"

    why = _rebuilt_after_manifest_edit(settings_for(sample_repo), older_release)
    assert why.startswith(f"the vectors of {HASH} (")


def test_an_index_of_another_model_is_rebuilt_with_a_message_naming_both(
        sample_repo: Path) -> None:
    # An index embedded with the previous default: every vector is made again, and the run says
    # which model the index had and which it has now.
    def previous_default(manifest: dict) -> None:
        manifest["model"] = "all-MiniLM-L6-v2"
        manifest["model_identity"] = "all-MiniLM-L6-v2|53aa51172d142c89|int8-pc7-v1|w160"

    why = _rebuilt_after_manifest_edit(settings_for(sample_repo), previous_default)
    assert why == f"the embedding model changed from all-MiniLM-L6-v2 to {HASH} (onnx-int8)"


def test_the_new_default_model_says_how_to_keep_the_old_one() -> None:
    from indexers.manifest import incompatible
    from rag_mcp.embed.catalog import DEFAULT

    s = load_settings({})
    assert s.embed_model == DEFAULT
    old = {"chunker_version": chunking.CHUNKER_VERSION, "embed_text_version": EMBED_TEXT_VERSION,
           "model": "all-MiniLM-L6-v2", "backend": "onnx-int8",
           "model_identity": "all-MiniLM-L6-v2|53aa51172d142c89|int8-pc7-v1|w160"}
    assert incompatible(old, s, f"{DEFAULT}|6c9c6101a956d62d|pkg-int8|w160", "embedded") == (
        f"the embedding model changed from all-MiniLM-L6-v2 to {DEFAULT} (onnx-int8) (the "
        "default model of this release; embed.model keeps the old one)")


def test_damaged_index_is_rebuilt(sample_repo: Path) -> None:
    s = settings_for(sample_repo)
    first = run_index(s)
    pointer = gen.read_pointer(s.index_path)
    assert pointer is not None
    (pointer.dir / gen.CATALOG).write_bytes(b"garbage" * 100)
    stats = run_index(s)
    assert stats.rebuilt.startswith("the existing index is damaged")
    assert stats.generation > first.generation and stats.spans_total == first.spans_total
