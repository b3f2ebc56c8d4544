"""The AST chunker on real grammars: golden spans per language, tiling properties, splitting."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexers.chunking import chunk_file, classify
from indexers.code import CHUNKER_VERSION, ParseFailed, chunk_code
from indexers.languages import (
    CODE_LANGUAGES,
    code_language_for_path,
    code_language_for_shebang,
    grammar,
)
from rag_mcp.index.spans import Chunk, span_text, split_lines

FIXTURES = Path(__file__).parent / "fixtures" / "code"
LANGUAGES = [lang.name for lang in CODE_LANGUAGES]


def fixture_path(language: str) -> Path:
    (path,) = [p for p in FIXTURES.glob(f"{language}.*") if p.suffix != ".json"]
    return path


def fixture_text(language: str) -> str:
    return fixture_path(language).read_text(encoding="utf-8")


def assert_tiles(text: str, chunks: list[Chunk]) -> None:
    """Every non-blank line in exactly one chunk; chunks sorted, disjoint, on non-blank lines."""
    lines = split_lines(text)
    previous_end = 0
    for chunk in chunks:
        assert chunk.kind == "code"
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines), chunk
        assert chunk.start_line > previous_end, chunk
        assert lines[chunk.start_line - 1].strip(), chunk
        assert lines[chunk.end_line - 1].strip(), chunk
        previous_end = chunk.end_line
    covered = {n for chunk in chunks for n in range(chunk.start_line, chunk.end_line + 1)}
    nonblank = {n for n, line in enumerate(lines, 1) if line.strip()}
    assert nonblank <= covered, sorted(nonblank - covered)[:5]


def rows(chunks: list[Chunk]) -> list[list]:
    return [
        [c.start_line, c.end_line, c.symbol, c.parent, dict(c.meta).get("def"), c.preview,
         c.context]
        for c in chunks
    ]


# -- golden spans --------------------------------------------------------------------------------


@pytest.mark.parametrize("language", LANGUAGES)
def test_fixture_spans_match_golden(language: str) -> None:
    path = fixture_path(language)
    assert code_language_for_path(str(path)) == language
    expected = json.loads(Path(f"{path}.spans.json").read_text(encoding="utf-8"))
    chunks = chunk_code(path.read_text(encoding="utf-8"), language)
    assert rows(chunks) == expected
    assert_tiles(path.read_text(encoding="utf-8"), chunks)


@pytest.mark.parametrize("language", LANGUAGES)
def test_definition_previews_are_their_signature_lines(language: str) -> None:
    text = fixture_text(language)
    lines = [line.strip() for line in split_lines(text)]
    firsts: dict[str, Chunk] = {}
    for chunk in chunk_code(text, language):
        if chunk.symbol is not None:
            firsts.setdefault(chunk.symbol, chunk)
    assert firsts
    for symbol, chunk in firsts.items():
        assert chunk.preview in lines[chunk.start_line - 1 : chunk.end_line], chunk
        assert not chunk.preview.startswith(("@", "#[", "//", "/*", "#", "* ")), chunk
        # the name's line, except where the name trails the body: `typedef struct {...} name;`
        assert symbol.rpartition(".")[2] in chunk.preview or "typedef" in chunk.preview, chunk


def test_python_class_members_and_nesting() -> None:
    chunks = {c.symbol: c for c in chunk_code(fixture_text("python"), "python")}
    header = chunks["Indexer"]
    assert (header.start_line, header.end_line) == (13, 16)  # header, docstring, field
    assert chunks["Indexer.run"].parent == "Indexer"
    assert chunks["Indexer.Options.describe"].parent == "Indexer.Options"
    assert chunks["parse_span_id"].parent is None
    assert dict(chunks["Indexer.run"].meta) == {"def": "method"}
    assert dict(chunks["main"].meta) == {"def": "function"}
    # the span holding a container's signature is its head: its members follow it
    assert dict(header.meta) == {"def": "class", "head": "1"}


def test_only_a_containers_signature_span_is_its_head() -> None:
    chunks = chunk_code(fixture_text("rust"), "rust")
    heads = {c.symbol for c in chunks if "head" in dict(c.meta)}
    assert "Span" in heads  # `impl Span {`, whose methods follow
    # a struct that holds no definition is whole, not a head, and neither is a method
    assert not [c for c in chunks if dict(c.meta).get("def") == "struct" and "head" in dict(c.meta)]
    assert not [c for c in chunks if dict(c.meta).get("def") in ("function", "method")
                and "head" in dict(c.meta)]


def test_a_re_export_carries_the_names_it_publishes() -> None:
    rust = ("pub use core::extract::{FromRef, FromRequest as Extract, parts::{Head, Body}};\n"
            "pub use crate::json::Json;\n"
            "use std::fmt;\n"
            "\n"
            "pub fn handler() {}\n")
    first, handler = chunk_code(rust, "rust")
    assert dict(first.meta) == {"exports": "FromRef Extract Head Body Json"}  # not `fmt`
    assert dict(handler.meta) == {"def": "function"}
    ts = ('export { ZodType, ZodError as Failure } from "./core";\n'
          'export * from "./schemas";\n'
          "\n"
          "export function parse() {}\n")
    for language in ("typescript", "javascript"):
        chunks = chunk_code(ts, language)
        assert dict(chunks[0].meta) == {"exports": "ZodType Failure"}, language
        assert "exports" not in dict(chunks[-1].meta)


def test_decorated_function_keeps_decorators_and_leading_comment() -> None:
    text = (
        "import functools\n"
        "\n"
        "# A section note, separated by a blank line.\n"
        "\n"
        "# Split an ID; the digest is checked by the caller.\n"
        "@functools.lru_cache(maxsize=256)\n"
        "@staticmethod\n"
        "def parse_span_id(span_id):\n"
        "    return span_id.rpartition(':')\n"
    )
    chunks = chunk_code(text, "python")
    target = [c for c in chunks if c.symbol == "parse_span_id"]
    assert len(target) == 1
    assert (target[0].start_line, target[0].end_line) == (5, 9)
    assert target[0].preview == "def parse_span_id(span_id):"
    assert chunks[0].symbol is None and chunks[0].end_line == 3
    assert_tiles(text, chunks)


def test_rust_attributes_and_doc_comments_stay_with_the_item() -> None:
    chunks = chunk_code(fixture_text("rust"), "rust")
    struct = [c for c in chunks if c.symbol == "Span" and dict(c.meta)["def"] == "struct"]
    assert struct[0].start_line == 8  # `/// One indexed range` above `#[derive(...)]`
    assert [c.start_line for c in chunks if c.symbol == "tests"] == [62]  # `#[cfg(test)]`


def test_nested_functions_stay_inside_their_function() -> None:
    text = (
        "def outer(items):\n"
        "    def key(item):\n"
        "        return item.name\n"
        "\n"
        "    class Local:\n"
        "        pass\n"
        "\n"
        "    return sorted(items, key=key)\n"
    )
    assert [(c.start_line, c.end_line, c.symbol) for c in chunk_code(text, "python")] == [
        (1, 8, "outer")
    ]


def test_typescript_ambient_module_names_lose_their_quotes() -> None:
    text = 'declare module "fs-extra" {\n  export function copy(src: string): Promise<void>;\n}\n'
    chunks = chunk_code(text, "typescript")
    assert [(c.symbol, c.parent) for c in chunks] == [
        ("fs-extra", None),
        ("fs-extra.copy", "fs-extra"),
    ]


# -- merging -------------------------------------------------------------------------------------


def test_imports_and_constants_merge_into_module_spans() -> None:
    imports = "".join(f"import module_{i}\n" for i in range(12))
    constants = "".join(f"LIMIT_{i} = {i}\n" for i in range(6))
    text = imports + "\n" + constants + "\n\ndef run():\n    return LIMIT_0\n"
    chunks = chunk_code(text, "python")
    assert [(c.start_line, c.end_line, c.symbol) for c in chunks] == [
        (1, 19, None),
        (22, 23, "run"),
    ]
    assert chunks[0].preview == "import module_0"
    small = chunk_code(text, "python", budget_chars=120)
    module = [c for c in small if c.symbol is None]
    assert len(module) > 2
    lines = split_lines(text)
    for chunk in module:
        assert len(span_text(lines, chunk.start_line, chunk.end_line)) < 120
    assert_tiles(text, small)


def test_a_node_ending_at_column_zero_ends_on_the_line_before() -> None:
    # tree-sitter-c ends a preprocessor line at column 0 of the next row
    text = "#include <stdio.h>\nint main(void) {\n    return 0;\n}\n"
    chunks = chunk_code(text, "c")
    assert [(c.start_line, c.end_line, c.symbol) for c in chunks] == [(1, 1, None), (2, 4, "main")]


def test_budget_counts_every_character_and_newline() -> None:
    line = "x = 12345\n"  # 10 characters with its newline
    assert len(chunk_code(line * 10, "python", budget_chars=100)) == 1
    assert len(chunk_code(line * 11, "python", budget_chars=100)) == 2


def test_module_preview_skips_comments() -> None:
    text = "// Copyright notice.\n// Second line.\nconst LIMIT = 3;\nlet x = LIMIT;\n"
    (chunk,) = chunk_code(text, "javascript")
    assert chunk.preview == "const LIMIT = 3;"


# -- splitting -----------------------------------------------------------------------------------


def statement_starts(text: str) -> set[int]:
    return {node.lineno for node in ast.walk(ast.parse(text)) if isinstance(node, ast.stmt)}


def test_long_function_splits_at_statement_boundaries() -> None:
    body = "".join(f"    total += compute_{i}(value, factor={i})  # step {i}\n" for i in range(60))
    text = f"def accumulate(value, factor):\n    total = 0\n{body}    return total\n"
    chunks = chunk_code(text, "python", budget_chars=400)
    assert len(chunks) > 3
    lines = split_lines(text)
    starts = statement_starts(text)
    for chunk in chunks:
        assert (chunk.symbol, chunk.parent) == ("accumulate", None)
        assert chunk.context == "def accumulate(value, factor):"
        assert chunk.preview == "def accumulate(value, factor):"
        assert len(span_text(lines, chunk.start_line, chunk.end_line)) < 400
    assert all(chunk.start_line in starts for chunk in chunks[1:])
    sizes = [c.end_line - c.start_line + 1 for c in chunks]
    assert max(sizes) - min(sizes) <= 3  # balanced, no one-line stub at the end
    assert_tiles(text, chunks)


def test_nested_blocks_split_inside_but_a_long_statement_stays_whole() -> None:
    table = "".join(f"        'key_{i}': {i},\n" for i in range(40))
    loop = "".join(f"            seen.add(item * {i})\n" for i in range(40))
    text = (
        "class Walker:\n"
        "    def walk(self, items):\n"
        "        seen = set()\n"
        f"        table = {{\n{table}        }}\n"
        "        for item in items:\n"
        f"{loop}"
        "        return seen, table\n"
    )
    chunks = [c for c in chunk_code(text, "python", budget_chars=500) if c.symbol == "Walker.walk"]
    assert len(chunks) > 3
    starts = statement_starts(text)
    table_lines = range(5, 46)  # `table = {` .. `}`
    for chunk in chunks[1:]:
        assert chunk.start_line in starts
        assert chunk.start_line not in table_lines[1:]
    whole = [c for c in chunks if c.start_line <= 4 and c.end_line >= 45]
    assert len(whole) == 1  # the dict literal is one statement: never cut
    assert any(c.start_line > 47 for c in chunks)  # the loop body was cut between statements
    assert all(c.context == "def walk(self, items):" for c in chunks)


def test_a_long_module_level_statement_splits_with_its_first_line_as_context() -> None:
    body = "".join(f"    print('step {i}', {i} * {i})\n" for i in range(40))
    text = f"import sys\n\nif __name__ == '__main__':\n{body}    sys.exit(0)\n"
    chunks = chunk_code(text, "python", budget_chars=300)
    assert len(chunks) > 3
    assert all(c.symbol is None for c in chunks)
    pieces = [c for c in chunks if c.end_line > 3]
    assert all(c.context == "if __name__ == '__main__':" for c in pieces)
    assert_tiles(text, chunks)


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("budget", [120, 400])
def test_small_budgets_keep_every_symbol_and_tile(language: str, budget: int) -> None:
    text = fixture_text(language)
    default = {c.symbol for c in chunk_code(text, language)}
    chunks = chunk_code(text, language, budget_chars=budget)
    assert {c.symbol for c in chunks} == default
    assert_tiles(text, chunks)


# -- line numbering ------------------------------------------------------------------------------


@pytest.mark.parametrize("language", LANGUAGES)
def test_crlf_bom_and_missing_final_newline_keep_line_numbers(language: str) -> None:
    text = fixture_text(language)

    def spans(source: str) -> list[tuple]:
        chunks = chunk_code(source, language)
        return [(c.start_line, c.end_line, c.symbol, c.preview) for c in chunks]

    expected = spans(text)
    for variant in (text.replace("\n", "\r\n"), "\ufeff" + text, text.rstrip("\n")):
        assert spans(variant) == expected


def test_multibyte_text_and_odd_separators_do_not_shift_lines() -> None:
    text = (
        'NOTE = "日本語のテキスト 🙂 \u2028 still line one \r not a break"\r\n'
        "\r\n"
        "# ünïcödé comment 🙂\r\n"
        "def größe(x):  # 🙂🙂🙂\r\n"
        "    return '€' * x\r\n"
        "\r\n"
        "def after():\r\n"
        "    return 1"
    )
    chunks = chunk_code(text, "python")
    lines = split_lines(text)
    spans = {c.symbol: (c.start_line, c.end_line) for c in chunks}
    assert spans["größe"] == (3, 5)
    assert spans["after"] == (7, len(lines))
    assert_tiles(text, chunks)


def test_lines_no_node_claims_join_the_span_above() -> None:
    # tree-sitter skips a zero-width space as whitespace; for str.strip it is text
    text = "def f():\n    return 1\n\u200b\n\ndef g():\n    return 2\n"
    chunks = chunk_code(text, "python")
    assert [(c.start_line, c.end_line, c.symbol) for c in chunks] == [(1, 3, "f"), (5, 6, "g")]


# -- failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("language", "text"),
    [
        ("python", "def (:\n" * 30),
        ("python", "This is prose, not code.\nIt has two sentences, see?\n"),
        ("javascript", "}}}{{{ ))) ((( @@@ !!!\n" * 20),
        ("c", "int x = ;;;; }} {{ ((( \n" * 20),
    ],
)
def test_unusable_tree_raises_parse_failed(language: str, text: str) -> None:
    with pytest.raises(ParseFailed) as info:
        chunk_code(text, language)
    assert info.value.reason == "parse_error"


def test_error_share_decides_between_spans_and_fallback() -> None:
    good = "def first():\n    return 1\n\n\ndef second():\n    return 2\n\n\n"
    assert [c.symbol for c in chunk_code(good + "}}} {{{ ??? !!!\n", "python")][:2] == [
        "first",
        "second",
    ]
    with pytest.raises(ParseFailed):
        chunk_code(good + "}}} {{{ ??? !!!\n" * 4, "python")


def test_a_local_syntax_error_still_gives_definition_spans() -> None:
    text = fixture_text("python").replace("    version = 3\n", "    version = = 3\n")
    chunks = chunk_code(text, "python")
    symbols = {c.symbol for c in chunks}
    assert {"Indexer.run", "parse_span_id", "main"} <= symbols
    assert_tiles(text, chunks)


CONDITIONAL_C = """\
int open_index(const char *path)
{
    return open(path, O_RDONLY);
}

int close_index(int fd)
{
    return close(fd);
}

int count_cpus(void)
{
    static int mib[][2] = {
# ifdef HW_NCPUONLINE
        { CTL_HW, HW_NCPUONLINE },
# endif
        { CTL_HW, HW_NCPU }
    };
    return mib[0][0];
}

int main(void)
{
    return count_cpus();
}
"""


def test_an_error_node_wrapping_parsed_definitions_is_not_garbage() -> None:
    # `# ifdef` inside an initializer makes tree-sitter wrap the rest of the file in one ERROR
    # node (over a third of the lines); the functions inside it still parse and keep names
    chunks = chunk_code(CONDITIONAL_C, "c")
    assert [c.symbol for c in chunks] == ["open_index", "close_index", None, "main"]
    assert_tiles(CONDITIONAL_C, chunks)


def test_a_doc_comment_one_blank_line_above_still_belongs_to_its_definition() -> None:
    text = (
        "/*! licence header */\n"
        "\n"
        "function first() {\n  return 1;\n}\n"
        "\n"
        "/**\n * Send a response.\n */\n"
        "\n"
        "res.send = function send(body) {\n  return body;\n};\n"
    )
    chunks = chunk_code(text, "javascript")
    # express writes its JSDoc, a blank line, then the function; a file's header stays apart
    assert [(c.start_line, c.symbol) for c in chunks] == [(1, None), (3, "first"),
                                                         (7, "res.send")]


def test_the_first_pattern_naming_a_node_wins() -> None:
    # both member-assignment patterns of javascript.scm could name it; the prototype one is first
    chunks = chunk_code("Layer.prototype.match = function (path) {\n  return 1;\n};\n",
                        "javascript")
    assert [(c.symbol, c.parent, dict(c.meta)["def"]) for c in chunks] == [
        ("Layer.match", "Layer", "method")]


@pytest.mark.parametrize(
    ("language", "text", "symbols"),
    [
        ("javascript", "res.type = res.contentType = function contentType(type) {\n};\n",
         ["res.type"]),
        ("javascript", "exports.json = function (v) {\n  return v;\n};\n", ["exports.json"]),
        ("javascript", "module.exports = function () {\n  return 1;\n};\n",
         ["module.exports"]),
        ("javascript", "run(function dispatch(resolve) {\n  resolve();\n});\n", ["dispatch"]),
        ("javascript", "on('close', function () {\n  done();\n});\n", [None]),
        ("typescript", "inst.parse = (data: unknown) => {\n  return data;\n};\n",
         ["inst.parse"]),
        ("python", "class A:\n    key = lambda self: self.k\n", ["A", "A.key"]),
        ("ruby", "task :build do\n  sh 'make'\nend\n", ["build"]),
        ("ruby", "Struct.new(:a) do\n  1\nend\n", [None]),
        ("go", "package p\n\ntype Handler func(int) error\n", [None, "Handler"]),
        ("c_sharp", "class A {\n    public int X { get; set; }\n}\n", ["A"]),
        ("php", "<?php\n$f = fn($x) => $x * 2;\n", [None, "f"]),
        ("rust", "impl Shape for [u8] {\n    fn area(&self) -> u32 { 0 }\n}\n",
         ["[u8]", "[u8].area"]),
    ],
)
def test_bound_functions_are_named_by_what_binds_them(language: str, text: str,
                                                       symbols: list[str | None]) -> None:
    assert [c.symbol for c in chunk_code(text, language)] == symbols


def test_nesting_deeper_than_python_recursion_raises_parse_failed() -> None:
    text = "namespace a {\n" * 1500 + "void f() {}\n" + "}\n" * 1500
    with pytest.raises(ParseFailed) as info:
        chunk_code(text, "cpp")
    assert info.value.reason == "too_deep"


def test_a_missing_grammar_wheel_is_a_parse_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    grammar.cache_clear()  # the wheel must be imported afresh to notice it is gone
    monkeypatch.setitem(sys.modules, "tree_sitter_go", None)  # makes the import fail
    try:
        with pytest.raises(ParseFailed) as info:
            chunk_code("package main\n", "go")
        assert info.value.reason == "grammar_unavailable"
    finally:
        grammar.cache_clear()


def test_blank_input_gives_no_chunks_and_unknown_language_is_an_error() -> None:
    assert chunk_code("", "python") == []
    assert chunk_code("\n  \n\t\r\n", "go") == []
    with pytest.raises(ValueError, match="unknown code language"):
        chunk_code("x = 1\n", "cobol")
    assert isinstance(CHUNKER_VERSION, str) and CHUNKER_VERSION


# -- properties ----------------------------------------------------------------------------------

ODD = ["", "", "é", "日本", "🙂", "\x00", "\r", "\u2028", "\x0c", "\ufeff", "\ud800", "\t"]


@st.composite
def mangled_fixture(draw: st.DrawFn, language: str) -> str:
    """Fixture fragments shuffled, truncated, with blank lines, odd characters and CRLF."""
    lines = split_lines(fixture_text(language))
    out: list[str] = []
    for _ in range(draw(st.integers(1, 6))):
        start = draw(st.integers(0, len(lines) - 1))
        out.extend(lines[start : start + draw(st.integers(1, 20))])
        out.extend([""] * draw(st.integers(0, 2)))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(out)))
        out.insert(at, draw(st.sampled_from(ODD)) + draw(st.sampled_from(out or [""])))
    text = draw(st.sampled_from(["\n", "\r\n"])).join(out)
    text = text[: draw(st.integers(len(text) // 2, len(text)))]
    return draw(st.sampled_from(["", "\ufeff"])) + text + draw(st.sampled_from(["", "\n"]))


def tiling_outcome(text: str, language: str, budget: int) -> str:
    """"tiled" when the chunks tile the text exactly, else the reason parsing was refused."""
    try:
        chunks = chunk_code(text, language, budget_chars=budget)
    except ParseFailed as failure:
        return failure.reason
    assert_tiles(text, chunks)
    return "tiled"


FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("language", LANGUAGES)
@FAST
@given(data=st.data(), budget=st.sampled_from([80, 300, 1500]))
def test_mangled_fixtures_tile_or_fail_cleanly(language: str, data: st.DataObject,
                                               budget: int) -> None:
    outcome = tiling_outcome(data.draw(mangled_fixture(language)), language, budget)
    assert outcome in ("tiled", "parse_error")


PYTHONISH = st.sampled_from(
    ["def ", "class ", "f", "(", "):", "\n", "\n    ", "\r\n", "#", "@d\n", "'", '"""', "x = 1",
     " ", "if x:", "\t", "\\\n", *ODD]
)


@settings(max_examples=150, deadline=None)
@given(text=st.one_of(st.text(max_size=300), st.lists(PYTHONISH, max_size=60).map("".join)),
       budget=st.sampled_from([40, 1500]))
def test_arbitrary_python_tiles_or_fails_cleanly(text: str, budget: int) -> None:
    assert tiling_outcome(text, "python", budget) in ("tiled", "parse_error")


# -- the language table --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "language"),
    [
        ("src/app.py", "python"), ("a/B.PY", "python"), ("x.mjs", "javascript"),
        ("x.jsx", "javascript"), ("x.cts", "typescript"), ("x.tsx", "tsx"), ("x.h", "c"),
        ("x.hpp", "cpp"), ("x.cc", "cpp"), ("x.cs", "c_sharp"), ("lib/Rakefile", "ruby"),
        ("Gemfile", "ruby"), ("x.php", "php"), ("x.bash", "bash"), ("x.go", "go"),
        ("x.rs", "rust"), ("x.java", "java"), ("notes.txt", None), ("Makefile", None),
        ("README", None), (".py", None),
    ],
)
def test_code_language_for_path(path: str, language: str | None) -> None:
    assert code_language_for_path(path) == language


@pytest.mark.parametrize(
    ("line", "language"),
    [
        ("#!/usr/bin/env bash", "bash"), ("#!/bin/sh -e", "bash"),
        ("#!/usr/bin/python3.12", "python"), ("#!/usr/bin/env -S node --no-warnings", "javascript"),
        ("#!/usr/bin/env FOO=1 ruby", "ruby"), ("#!", None), ("# just a comment", None),
        ("#!/usr/bin/perl", None),
    ],
)
def test_code_language_for_shebang(line: str, language: str | None) -> None:
    assert code_language_for_shebang(line) == language


def test_a_script_without_a_suffix_is_parsed_by_its_shebang() -> None:
    script = "#!/usr/bin/env bash\nset -e\n\ndeploy() {\n  echo up\n}\n\ndeploy\n"
    assert classify("bin/deploy", script) == ("bash", "code")
    chunked = chunk_file("bin/deploy", script, budget_chars=1500, window_lines=40,
                         window_overlap=0)
    assert "deploy" in [c.symbol for c in chunked.chunks]
    # a suffix decides alone: a text file that happens to start with #! stays text
    assert classify("notes.txt", script) == ("text", "text")
    assert classify("LICENSE", "Copyright (c) 2024\n")[0] != "bash"


CPP_HEADER = """// A C++ header named .h, as many projects name theirs.
#include <string>

namespace fmt {
template <typename T> class buffer {
 public:
  explicit buffer(T* data) : data_(data) {}
  T* data() { return data_; }

 private:
  T* data_;
};
}  // namespace fmt
"""
C_HEADER = """#ifndef UV_H
#define UV_H
#ifdef __cplusplus
extern "C" {
#endif
#include <stddef.h>

/* A C header: its guard for C++ readers is no C++. */
typedef struct uv_loop_s uv_loop_t;
int uv_run(uv_loop_t* loop);

#ifdef __cplusplus
}
#endif
#endif
"""


def test_a_cpp_header_named_h_is_parsed_as_cpp() -> None:
    cpp = chunk_file("include/fmt/base.h", CPP_HEADER, budget_chars=1500, window_lines=40,
                     window_overlap=0)
    assert (cpp.language, cpp.fallback) == ("cpp", "")
    assert any((c.symbol or "").endswith("buffer") for c in cpp.chunks)
    c = chunk_file("include/uv.h", C_HEADER, budget_chars=1500, window_lines=40,
                   window_overlap=0)
    assert (c.language, c.fallback) == ("c", "")


def test_every_language_has_a_query_with_blocks_and_a_fixture() -> None:
    for lang in CODE_LANGUAGES:
        loaded = grammar(lang.name)
        assert loaded.block_kinds and loaded.doc_kinds, lang.name
        assert loaded.definitions.pattern_count > 0
        assert Path(f"{fixture_path(lang.name)}.spans.json").is_file()
        for ext in lang.extensions:
            assert code_language_for_path(f"file{ext}") == lang.name


def test_importing_the_chunker_loads_no_grammar() -> None:
    code = (
        "import sys, indexers.languages, indexers.code\n"
        "print(sorted(m for m in sys.modules if m.startswith('tree_sitter')))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).parent.parent)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
