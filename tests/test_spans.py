from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rag_mcp.errors import InvalidArgument
from rag_mcp.index.spans import (
    digest,
    embedding_key,
    embedding_text,
    make_span_id,
    parse_span_id,
    query_embedding_text,
    span_text,
    split_case,
    split_lines,
)


def test_split_lines_numbers_like_an_editor() -> None:
    assert split_lines("a\nb\n") == ["a", "b"]
    assert split_lines("a\r\nb") == ["a", "b"]
    assert split_lines("a\x0bb\u2028c\n") == ["a\x0bb\u2028c"]  # only \n ends a line
    assert split_lines("") == []
    assert split_lines("\n\n") == ["", ""]


def test_digest_ignores_line_endings() -> None:
    lf = split_lines("def f():\n    return 1\n")
    crlf = split_lines("def f():\r\n    return 1\r\n")
    assert digest(span_text(lf, 1, 2)) == digest(span_text(crlf, 1, 2))


def test_span_id_round_trip_with_colons_in_path() -> None:
    sid = make_span_id("dir:odd/file.py", 10, 42, "3f2a9c1be07d")
    parsed = parse_span_id(sid)
    assert (parsed.path, parsed.start_line, parsed.end_line) == ("dir:odd/file.py", 10, 42)
    assert str(parsed) == sid


@pytest.mark.parametrize("bad", [
    "", "no-digest", "a.py:1-2", "a.py:1-2:XYZ", "a.py:0-2:3f2a9c1be07d",
    "a.py:5-2:3f2a9c1be07d", ":1-2:3f2a9c1be07d", "a.py:1-2:3f2a9c1be07dd",
    "a\x00.py:1-2:3f2a9c1be07d", "a" * 2000 + ":1-2:3f2a9c1be07d", 42, None,
])
def test_bad_span_ids_are_invalid_arguments(bad: object) -> None:
    with pytest.raises(InvalidArgument):
        parse_span_id(bad)


@given(st.text(min_size=1, max_size=60).filter(lambda p: "\x00" not in p),
       st.integers(1, 10**6), st.integers(0, 10**6))
def test_any_made_id_parses_back(path: str, start: int, extra: int) -> None:
    sid = make_span_id(path, start, start + extra, "0123456789ab")
    p = parse_span_id(sid)
    assert (p.path, p.start_line, p.end_line, p.digest) == (path, start, start + extra,
                                                           "0123456789ab")


def test_embedding_key_depends_on_model_and_text() -> None:
    assert embedding_key("m1", "x") == embedding_key("m1", "x")
    assert embedding_key("m1", "x") != embedding_key("m2", "x")
    assert embedding_key("m1", "x") != embedding_key("m1", "y")


@pytest.mark.parametrize(("ident", "words"), [
    ("parseHTTPResponse", "parse HTTP Response"),
    ("baseIsNative", "base Is Native"),
    ("XMLHttpRequest", "XML Http Request"),
    ("utf8Decode", "utf8 Decode"),
    ("MissingSchema", "Missing Schema"),
    ("snake_case_name", "snake_case_name"),
    ("CONSTANT_VALUE", "CONSTANT_VALUE"),
    ("already plain words", "already plain words"),
])
def test_split_case_separates_the_words_of_identifiers(ident: str, words: str) -> None:
    assert split_case(ident) == words


@given(st.text())
def test_split_case_only_adds_spaces(text: str) -> None:
    out = split_case(text)
    assert out.replace(" ", "") == text.replace(" ", "")
    assert split_case(out) == out  # idempotent: a split text has no boundary left


def test_code_spans_and_queries_are_embedded_with_identifiers_split() -> None:
    emb = embedding_text("src/parseUtils.ts", "parseHTTPResponse", "", "return toJSON(body)",
                         kind="code")
    assert emb == "src/parse Utils.ts\nparse HTTP Response\nreturn to JSON(body)"
    assert query_embedding_text("where is parseHTTPResponse") == "where is parse HTTP Response"


@pytest.mark.parametrize("kind", ["doc", "text"])
def test_prose_spans_keep_their_spelling(kind: str) -> None:
    # in prose a PascalCase word is a name the model may know whole (GitHub, JavaScript)
    text = "Deploy FastAPI on GitHub with JavaScript"
    assert embedding_text("docs/deploy.md", "Deploy > GitHub", "", text, kind=kind) == (
        "docs/deploy.md\nDeploy > GitHub\n" + text)
