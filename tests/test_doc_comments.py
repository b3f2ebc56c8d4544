"""Questions from doc comments outside Python (rag-eval --docstrings), with real grammars."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from indexers.doc_comments import COMMENTS, comment_end, comment_text, strip_doc_comments
from indexers.languages import CODE_LANGUAGES, code_language_for_path

POLYGLOT = Path(__file__).parent / "fixtures" / "eval" / "polyglot"
HASH_MODEL = "test-hash-64"


def strip(rel: str) -> tuple[list[str], list[str], list[tuple[str, str, int, int]]]:
    text = (POLYGLOT / rel).read_text(encoding="utf-8")
    lang = code_language_for_path(rel)
    assert lang is not None
    out, docs = strip_doc_comments(text, lang)
    return text.split("\n"), out.split("\n"), [(d.name, d.query, d.start_line, d.end_line)
                                               for d in docs]


@pytest.mark.parametrize(("rel", "expected"), [
    ("src/query.js", [
        ("parseQuery", "Parses the query string of a URL into an object of keys and values",
         11, 18),
        ("Cache.prune", "Removes every entry older than Cache#ttl milliseconds from the cache",
         22, 28)]),
    ("src/store.go", [
        ("Store.Get", "returns the value stored under key, or false when the key is missing",
         4, 9),
        ("Store.Compact",
         "rewrites the log file without the entries that were deleted since the last run",
         12, 134)]),
    ("src/words.rs", [
        ("count_words", "Splits the input into lines and counts the words on each one", 2, 8)]),
    ("src/A.java", [
        ("A.max", "Returns the larger of two numbers, preferring the first on a tie", 6, 13)]),
    ("src/greeter.rb", [
        ("Greeter.greet", "Builds a greeting message for the given person name", 3, 7)]),
    ("src/notes.ts", [
        ("Notes.search",
         "Finds every note whose title contains the given words, ignoring case", 15, 20),
        ("Notes.count", "Counts the notes", 23, 26)]),
])
def test_each_language_gives_its_documented_functions(
        rel: str, expected: list[tuple[str, str, int, int]]) -> None:
    before, after, docs = strip(rel)
    assert docs == expected
    assert len(after) == len(before)  # line numbers are the user's
    for _, query, start, _end in docs:
        # the gold starts below the comment (attributes and annotations included) ...
        assert after[start - 1].strip() and before[start - 1] == after[start - 1]
        # ... and the comment above it is gone, so the index cannot answer with its own text
        word = max(query.split(), key=len)
        assert any(word in line for line in before[max(0, start - 6):start - 1])
        assert not any(word in line for line in after[max(0, start - 6):start - 1])


def test_what_is_not_a_question() -> None:
    before, after, docs = strip("src/query.js")
    assert "Copyright" in after[1]  # a licence block apart from any function stays as it is
    _, after_ts, docs_ts = strip("src/notes.ts")
    names = [d[0] for d in docs_ts]
    assert "Notes.rebuild" not in names  # a TODO is a note to the authors
    assert not any("TODO" in line for line in after_ts)  # ... hidden all the same
    # a one-line `/** doc */ isEmpty() {...}`: code shares the line, nothing is blanked
    assert "Notes.isEmpty" not in names
    assert any("Returns true when the note is empty" in line for line in after_ts)
    # a comment inside a body is not documentation
    assert any("// keep the titles that match" in line for line in after_ts)
    # test functions never ask, even when documented
    assert strip("test/store_test.go")[2] == []


def test_a_long_function_is_one_gold_over_all_its_pieces() -> None:
    from indexers.code import chunk_code

    text = (POLYGLOT / "src/store.go").read_text()
    pieces = [c for c in chunk_code(text, "go") if c.symbol == "Store.Compact"]
    assert len(pieces) > 1
    compact = next(d for d in strip("src/store.go")[2] if d[0] == "Store.Compact")
    assert (compact[2], compact[3]) == (pieces[0].start_line + 1, pieces[-1].end_line)


def test_comment_runs_and_their_prose() -> None:
    c = COMMENTS["javascript"]
    lines = ["/**", " * Does a thing.", " * @param {x} y", " */", "function f() {}"]
    assert comment_end(lines, 0, 4, c) == 4
    assert comment_end(["/* a */ let x = 1;"], 0, 0, c) == 0
    assert comment_end(["/* a", " b */ x();"], 0, 1, c) == 1
    assert comment_end(["#[inline]", "fn f() {}"], 0, 1, COMMENTS["rust"]) == 0
    assert comment_end(["# a", "# b", "def f"], 0, 2, COMMENTS["ruby"]) == 2
    assert comment_text(lines[:4]).strip() == "Does a thing."
    # a comment that is only tags has no description, whatever its continuation lines say
    assert comment_text(["/**", " * @param s The function called when it is", " *   initially "
                         "subscribed to.", " */"]).strip() == ""
    assert comment_text(["/// See {@link Foo} and <b>bar</b>."]) == "See Foo and bar."


def test_every_code_language_but_python_has_a_comment_syntax() -> None:
    # Python's docstrings are read by its own parser (rag_mcp.eval.sets.strip_docstrings)
    assert {lang.name for lang in CODE_LANGUAGES} - set(COMMENTS) == {"python"}
    with pytest.raises(ValueError):
        strip_doc_comments("x = 1", "python")


def test_rag_eval_docstrings_asks_about_every_language(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from indexers.eval_cli import main

    root = tmp_path / "repo"
    shutil.copytree(POLYGLOT, root)
    monkeypatch.setenv("RAG_EMBED_MODEL", HASH_MODEL)
    saved = tmp_path / "questions.jsonl"
    code = main(["--docstrings", "--root", str(root), "--json", "--save-queries", str(saved)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert orjson.loads(out.out)["queries"] == 9
    questions = {q["name"]: q for q in map(orjson.loads, saved.read_bytes().splitlines())}
    assert set(questions) == {"parseQuery", "Cache.prune", "Store.Get", "Store.Compact",
                              "count_words", "A.max", "Greeter.greet", "Notes.search",
                              "Notes.count"}
    assert questions["A.max"]["gold"] == [{"path": "src/A.java", "start_line": 6,
                                           "end_line": 13}]
    for rel in ("src/A.java", "src/store.go"):  # the user's files untouched
        assert (root / rel).read_text() == (POLYGLOT / rel).read_text()


def test_every_code_fixture_keeps_its_lines_and_its_gold() -> None:
    """Over the golden fixtures of every language: only whole comment lines are blanked, and
    each gold starts on a line the user's file has, unchanged."""
    fixtures = Path(__file__).parent / "fixtures"
    seen: set[str] = set()
    for path in sorted(fixtures.rglob("*")):
        lang = code_language_for_path(path.name)
        if not path.is_file() or lang not in COMMENTS:
            continue
        text = path.read_text(encoding="utf-8")
        try:
            out, docs = strip_doc_comments(text, lang)
        except ValueError:
            continue  # a fixture the grammar cannot chunk is indexed as it is
        seen.add(lang)
        before, after = text.split("\n"), out.split("\n")
        assert len(after) == len(before), path
        assert all(a == b or b == "" for a, b in zip(before, after, strict=True)), path
        for d in docs:
            assert after[d.start_line - 1].strip(), (path, d)
            assert after[d.start_line - 1] == before[d.start_line - 1], (path, d)
            assert d.start_line < d.end_line <= len(before), (path, d)
    assert len(seen) >= 10  # the fixtures cover the table, not one language
