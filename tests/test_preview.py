"""Previews say what a span is: a signature, a doc comment's first sentence or a section's first
sentence; never a directive, a bare comment marker or the heading the hit already shows."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from rag_mcp.index.spans import Span
from rag_mcp.search.preview import describe, first_sentence


def span(kind: str, preview: str, symbol: str | None = None, heading: str | None = None,
         language: str = "javascript") -> Span:
    return Span("lib/x", 1, 9, "0" * 12, kind, language, symbol=symbol, heading=heading,
                preview=preview)


@pytest.mark.parametrize(("text", "stored", "want"), [
    # a file that opens with a directive and a JSDoc block
    ("'use strict';\n\n/**\n * Module dependencies.\n * @private\n */\n\nvar a = require('a');",
     "'use strict';", "Module dependencies."),
    # JSDoc whose summary runs over two lines, then tags
    ("/**\n * Send a response. Sets the headers\n * first.\n *\n * @param {string} body\n */\n"
     "res.send = function send(body) {", "/**", "Send a response."),
    # a Python module docstring
    ('"""Span IDs for the demo app.\n\nMore words.\n"""\n\nimport hashlib\n', '"""Span IDs',
     "Span IDs for the demo app."),
    ('"""\nHelpers for dates. And times.\n"""\nimport time\n', '"""', "Helpers for dates."),
    # line comments
    ("// Copyright Joyent\n// License: MIT\nvar x = 1;\n", "// Copyright Joyent",
     "Copyright Joyent License: MIT"),
    ("#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n\nimport os\n", "#!/usr/bin/env python",
     "import os"),
    # C's preprocessor is code, not a comment
    ("#include <stdio.h>\n\nint main(void) {\n", "#include <stdio.h>", "#include <stdio.h>"),
    # a bare statement after a blank comment marker
    ("#\n\nparam();\n", "#", "param();"),
])
def test_code_without_a_name_is_previewed_by_what_it_says(text: str, stored: str,
                                                          want: str) -> None:
    assert describe(span("code", stored), text) == want


def test_a_definition_keeps_its_signature() -> None:
    text = "/**\n * Send a response.\n */\nres.send = function send(body) {\n  return 1;\n};"
    sig = "res.send = function send(body) {"
    assert describe(span("code", sig, symbol="res.send"), text) == sig
    # a signature-less stored line of a named span (a marker) falls back to the text
    assert describe(span("code", "/**", symbol="res.send"), text) == "Send a response."


@pytest.mark.parametrize(("text", "heading", "want"), [
    ("# Installing\n\nRun the installer. Then reboot.\n", "Installing", "Run the installer."),
    ("## Linux\n\n### Debian\n\nRun `apt install demo` and start it.\n", "Install > Linux",
     "Run `apt install demo` and start it."),
    ("====== Plugins ======\n\nPlugins extend DokuWiki. They are many.\n", "Plugins",
     "Plugins extend DokuWiki."),
    ("Usage\n=====\n\n- call ``run()`` first\n- then stop\n", "Usage",
     "call ``run()`` first then stop"),
    ("## Example\n\n```python\nprint(1)\n```\n\nThat prints one.\n", "Example", "That prints one."),
])
def test_a_section_is_previewed_by_its_first_sentence(text: str, heading: str, want: str) -> None:
    title = heading.rsplit(" > ", 1)[-1]
    assert describe(span("doc", title, heading=heading, language="markdown"), text) == want


def test_a_section_that_is_only_a_heading_keeps_it_and_no_text_keeps_the_stored_line() -> None:
    assert describe(span("doc", "Empty", heading="Empty"), "# Empty\n") == "Empty"
    assert describe(span("code", "def f():", symbol="f"), None) == "def f():"


def test_first_sentence_is_one_line_and_bounded() -> None:
    assert first_sentence("One two.\nThree.") == "One two."
    assert first_sentence("e.g. this stays whole") == "e.g. this stays whole"
    long = first_sentence("word " * 100)
    assert len(long) <= 200 and long.endswith("…")


def test_rag_query_previews_say_what_the_span_is(make_repo: Callable[..., Path],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from indexers.pipeline import run_index
    from rag_mcp.config import load_settings
    from rag_mcp.deps import build_deps
    from rag_mcp.search.records import QueryParams

    monkeypatch.setenv("RAG_EMBED_MODEL", "test-hash-64")
    root = make_repo({
        "lib/app.js": textwrap.dedent("""\
            'use strict';

            var path = require('path');
            var cache = {};
            """),
        "docs/guide.md": "# Guide\n\n## Caching\n\nThe cache keeps rendered views. It is cleared "
                         "on restart.\n",
    })
    run_index(load_settings({"root": str(root)}))
    deps = build_deps(load_settings({"root": str(root), "join_gap": "-1", "tau": "0"}))
    try:
        ans = deps.queries.query(QueryParams("cache path views", k=5))
        by_path = {h.path: h.preview for h in ans.hits}
        assert by_path["lib/app.js"] == "var path = require('path');"
        assert "The cache keeps rendered views." in by_path.values()
        assert not any(p in ("'use strict';", "Caching", "/**") for p in by_path.values())
    finally:
        deps.close()
