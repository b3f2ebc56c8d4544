from __future__ import annotations

from pathlib import Path

from rag_mcp.index.lexical import LexicalIndex, split_identifier, tokenize


def test_identifiers_are_kept_whole_and_split() -> None:
    assert split_identifier("parseHTTPResponse") == ["parse", "http", "response"]
    assert split_identifier("parse_span_id") == ["parse", "span", "id"]
    toks = tokenize("def parseHTTPResponse(raw): return HTTPError")
    for t in ("parsehttpresponse", "parse", "http", "response", "httperror", "error", "raw"):
        assert t in toks
    assert "the" not in tokenize("the file")


def test_exact_identifier_ranks_its_definition_first(tmp_path: Path) -> None:
    ix = LexicalIndex(tmp_path / "lx", create=True)
    docs = {
        1: "def parse_span_id(span_id): path, rng, digest = span_id.rsplit(':', 2)",
        2: "def parse(text): return span and id in text",
        3: "class HTTPError(Exception): pass",
        4: "def fetch(url): raise HTTPError(404) if missing else response",
    }
    for sid, text in docs.items():
        ix.add(sid, tokenize(text), tokenize(text.split("(")[0]))
    ix.commit()
    assert ix.search(tokenize("parse_span_id"), 3)[0][0] == 1
    assert ix.search(tokenize("HTTPError"), 3)[0][0] == 3
    ix.delete([3])
    ix.commit()
    assert [s for s, _ in ix.search(tokenize("HTTPError"), 3)] == [4]
    assert ix.num_docs() == 3
    reopened = LexicalIndex(tmp_path / "lx")
    assert reopened.search(tokenize("parse span id"), 1)[0][0] in (1, 2)
