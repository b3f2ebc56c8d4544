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


def _index(path: Path, docs: dict[int, str]) -> LexicalIndex:
    """An index of ``docs`` (sid -> text); a span's name is its text up to the first "("."""
    ix = LexicalIndex(path, create=True)
    for sid, text in docs.items():
        ix.add(sid, tokenize(text), tokenize(text.split("(")[0]))
    ix.commit()
    return ix


def test_exact_identifier_ranks_its_definition_first(tmp_path: Path) -> None:
    ix = _index(tmp_path / "lx", {
        1: "def parse_span_id(span_id): path, rng, digest = span_id.rsplit(':', 2)",
        2: "def parse(text): return span and id in text",
        3: "class HTTPError(Exception): pass",
        4: "def fetch(url): raise HTTPError(404) if missing else response",
    })
    assert ix.search(tokenize("parse_span_id"), 3)[0][0] == 1
    assert ix.search(tokenize("HTTPError"), 3)[0][0] == 3
    ix.delete([3])
    ix.commit()
    assert [s for s, _ in ix.search(tokenize("HTTPError"), 3)] == [4]
    assert ix.num_docs() == 3
    reopened = LexicalIndex(tmp_path / "lx")
    assert reopened.search(tokenize("parse span id"), 1)[0][0] in (1, 2)


def test_words_of_every_script_are_whole_tokens() -> None:
    # German, French, Russian, Greek: a word with a letter outside ASCII is one token, not the
    # ASCII runs around that letter ("zugriffsbeschr", "nkung") or nothing at all (Cyrillic)
    assert tokenize("Zugriffsbeschränkung") == ["zugriffsbeschränkung"]
    assert tokenize("récupérer l'élément") == ["récupérer", "l", "élément"]
    assert tokenize("Функция возвращает") == ["функция", "возвращает"]
    assert tokenize("ΛΌΓΟΣ") == tokenize("λόγος") == ["λόγοσ"]  # final sigma folds too
    # case folded the Unicode way, and a decomposed accent is the composed one (NFKC)
    assert tokenize("STRASSE") == tokenize("Straße") == ["strasse"]
    assert tokenize("e\u0301le\u0300ve") == tokenize("\u00e9l\u00e8ve") == ["\u00e9l\u00e8ve"]
    # accents are kept: "où" (where) is not "ou" (or)
    assert tokenize("où") != tokenize("ou")
    # a word mixing scripts with "_" still splits there
    assert split_identifier("größe_berechnen") == ["grösse", "berechnen"]


def test_a_question_in_another_script_finds_its_page_by_keywords(tmp_path: Path) -> None:
    ix = _index(tmp_path / "lx", {
        1: "Die Zugriffsbeschränkung einer Seite ändern Sie unter Administration.",
        2: "Die Zugriffsrechte beschreiben, wer eine Seite lesen darf. Änderungen nkung beschr",
        3: "Права доступа: кто может читать страницу.",
        4: "Access control: who may read a page.",
    })
    assert ix.search(tokenize("Zugriffsbeschränkung ändern"), 4)[0][0] == 1
    assert [s for s, _ in ix.search(tokenize("права доступа"), 4)] == [3]


def test_an_index_of_ascii_only_tokens_is_rebuilt_with_a_reason() -> None:
    from indexers import manifest
    from rag_mcp.config import load_settings

    s = load_settings({})
    now = {"chunker_version": manifest.chunking.CHUNKER_VERSION,
           "embed_text_version": manifest.EMBED_TEXT_VERSION,
           "pages_version": manifest.PAGES_VERSION, "tokens_version": manifest.TOKENS_VERSION,
           "model_identity": "id", "model": s.embed_model, "backend": s.embed_backend,
           "embed_max_tokens": s.embed_max_tokens}
    before = {k: v for k, v in now.items() if k != "tokens_version"}
    assert "every script" in manifest.incompatible(before, s, "id", "chroma")
    assert "every script" not in manifest.incompatible(now, s, "id", "chroma")
