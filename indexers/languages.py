"""The table of code languages: which files they claim and where their grammar and query live.

Adding a language is one row here, one ``queries/<name>.scm`` file and one test fixture. Grammar
modules are imported on first use only, so importing this module (or listing files by language)
never loads tree-sitter or any grammar.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import threading
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Language, Parser, Query


@dataclass(frozen=True, slots=True)
class CodeLanguage:
    name: str
    #: lower-case file suffixes, with the dot
    extensions: tuple[str, ...]
    #: grammar wheel module and the function in it returning the language pointer
    module: str
    function: str
    #: file names claimed regardless of suffix (``Rakefile``)
    filenames: tuple[str, ...] = ()
    #: interpreter names that identify a script by its ``#!`` line
    interpreters: tuple[str, ...] = ()
    #: file under ``indexers/queries``; "" means ``<name>.scm``
    query: str = ""

    @property
    def query_file(self) -> str:
        return self.query or f"{self.name}.scm"


CODE_LANGUAGES: tuple[CodeLanguage, ...] = (
    CodeLanguage("python", (".py", ".pyi", ".pyw"), "tree_sitter_python", "language",
                 interpreters=("python", "python3", "python2", "pypy3")),
    CodeLanguage("javascript", (".js", ".mjs", ".cjs", ".jsx"), "tree_sitter_javascript",
                 "language", interpreters=("node", "nodejs", "deno", "bun")),
    CodeLanguage("typescript", (".ts", ".mts", ".cts"), "tree_sitter_typescript",
                 "language_typescript", interpreters=("ts-node", "tsx")),
    CodeLanguage("tsx", (".tsx",), "tree_sitter_typescript", "language_tsx",
                 query="typescript.scm"),
    CodeLanguage("go", (".go",), "tree_sitter_go", "language"),
    CodeLanguage("rust", (".rs",), "tree_sitter_rust", "language"),
    CodeLanguage("java", (".java",), "tree_sitter_java", "language"),
    # ".h" is shared with C++: a C++ header the C grammar cannot parse falls back to windows
    CodeLanguage("c", (".c", ".h"), "tree_sitter_c", "language"),
    CodeLanguage("cpp", (".cc", ".cpp", ".cxx", ".c++", ".hpp", ".hh", ".hxx", ".h++", ".ipp",
                         ".tpp", ".inl"), "tree_sitter_cpp", "language"),
    CodeLanguage("c_sharp", (".cs",), "tree_sitter_c_sharp", "language"),
    CodeLanguage("ruby", (".rb", ".rake", ".gemspec", ".ru"), "tree_sitter_ruby", "language",
                 filenames=("Rakefile", "Gemfile", "Guardfile", "Vagrantfile"),
                 interpreters=("ruby",)),
    CodeLanguage("php", (".php",), "tree_sitter_php", "language_php", interpreters=("php",)),
    CodeLanguage("bash", (".sh", ".bash"), "tree_sitter_bash", "language",
                 filenames=(".bashrc", ".bash_profile", ".bash_aliases"),
                 interpreters=("sh", "bash", "dash", "ksh", "zsh")),
)

_BY_NAME = {lang.name: lang for lang in CODE_LANGUAGES}
_BY_EXTENSION = {ext: lang.name for lang in CODE_LANGUAGES for ext in lang.extensions}
_BY_FILENAME = {fname: lang.name for lang in CODE_LANGUAGES for fname in lang.filenames}
_BY_INTERPRETER = {cmd: lang.name for lang in CODE_LANGUAGES for cmd in lang.interpreters}


def code_language_for_path(path: str) -> str | None:
    """The code language a file belongs to by its name, or None if it is not code we parse."""
    base = os.path.basename(path)
    by_name = _BY_FILENAME.get(base)
    if by_name is not None:
        return by_name
    _, ext = os.path.splitext(base)
    return _BY_EXTENSION.get(ext.lower()) if ext else None


def code_language_for_shebang(first_line: str) -> str | None:
    """The language named by a ``#!`` line (``#!/usr/bin/env bash`` -> ``bash``), else None."""
    if not first_line.startswith("#!"):
        return None
    words = first_line[2:].split()
    if not words:
        return None
    command = os.path.basename(words[0])
    if command == "env":
        # skip env's own flags (``env -S node --flag``) and VAR=value assignments
        rest = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        if not rest:
            return None
        command = os.path.basename(rest[0])
    name = _BY_INTERPRETER.get(command)
    if name is None:
        # versioned interpreters: python3.12, ruby3.2, php8.1
        name = _BY_INTERPRETER.get(command.rstrip("0123456789.").rstrip("-"))
    return name


@dataclass(frozen=True, slots=True)
class Grammar:
    """A loaded grammar with its compiled query file; shared by every thread."""

    name: str
    language: Language
    #: the query file's definition patterns (``@definition.<kind>``, ``@name``, ``@parent``)
    definitions: Query
    #: node kind ids of leading trivia (``@doc``): comments, decorators, attributes
    doc_kinds: frozenset[int]
    #: node kind ids of statement lists (``@block``) an oversized unit may be cut between
    block_kinds: frozenset[int]
    #: ERROR nodes, to judge whether a tree is usable
    errors: Query


#: captures that mark node types rather than definitions; their patterns may only list types
KIND_CAPTURES = ("doc", "block")
_KIND_PATTERN = re.compile(r"\[?(\s*\(\s*\w+\s*\))+\s*\]?\s*@(\w+)")
_NODE_TYPE = re.compile(r"\(\s*(\w+)\s*\)")
_COMMENT_LINE = re.compile(r"^\s*;.*$", re.MULTILINE)


@functools.cache
def grammar(name: str) -> Grammar:
    """Load a language's grammar and compile its query file, once per process.

    Raises ``KeyError`` for a name not in ``CODE_LANGUAGES``, ``ImportError`` when the grammar
    wheel is missing and ``tree_sitter.QueryError`` or ``ValueError`` for a broken query file.
    """
    spec = _BY_NAME[name]
    from tree_sitter import Language, Query

    module = importlib.import_module(spec.module)
    language = Language(getattr(module, spec.function)())
    source = resources.files("indexers").joinpath("queries", spec.query_file).read_text("utf-8")
    raw = source.encode("utf-8")
    definitions = Query(language, source)  # compiling checks every node type in the file
    types: dict[str, set[str]] = {capture: set() for capture in KIND_CAPTURES}
    for index in range(definitions.pattern_count):
        start = definitions.start_byte_for_pattern(index)
        pattern = raw[start : definitions.end_byte_for_pattern(index)].decode("utf-8")
        # a pattern's text runs up to the next pattern, comment lines included
        pattern = _COMMENT_LINE.sub("", pattern).strip()
        match = _KIND_PATTERN.fullmatch(pattern)
        if match is None or match.group(2) not in types:
            if any(f"@{capture}" in pattern for capture in KIND_CAPTURES):
                raise ValueError(f"{spec.query_file}: @doc and @block may only list node types")
            continue
        # the layout tests these node by node, where a set lookup costs nothing and a query run
        # would walk whole subtrees again
        types[match.group(2)].update(_NODE_TYPE.findall(pattern))
        definitions.disable_pattern(index)
    kinds = {
        capture: frozenset(
            kind
            for kind in range(language.node_kind_count)
            if language.node_kind_is_named(kind) and language.node_kind_for_id(kind) in names
        )
        for capture, names in types.items()
    }
    errors = Query(language, "(ERROR) @error")
    return Grammar(name, language, definitions, kinds["doc"], kinds["block"], errors)


_local = threading.local()


def parser_for(name: str) -> Parser:
    """A parser for the language, one per thread (tree-sitter parsers are not thread-safe)."""
    parsers: dict[str, Parser] | None = getattr(_local, "parsers", None)
    if parsers is None:
        parsers = _local.parsers = {}
    parser = parsers.get(name)
    if parser is None:
        from tree_sitter import Parser

        parser = parsers[name] = Parser(grammar(name).language)
    return parser
