"""The ranking stage (rag_mcp/search/rank.py): a symbol query ranks its definition first, a
question about code gets the code before the README that restates it, answers spread over
files, and every rule can be switched off (``query.rank = false`` keeps the fusion's order)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from rag_mcp.config import load_settings
from rag_mcp.deps import build_deps
from rag_mcp.search import paths as P
from rag_mcp.search import rank as R
from rag_mcp.search.retrieve import Filters

HASH_MODEL = "test-hash-64"


def _order(root: Path, query: str, rank: bool) -> list[tuple[str, str]]:
    r = build_deps(load_settings({"root": str(root), "rank": rank})).repo().retriever
    return [(h.span.path, h.span.label) for h in r.retrieve(query, Filters()).hits]


@pytest.fixture
def indexed(make_repo: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
            ) -> Callable[[dict[str, str]], Path]:
    from indexers.pipeline import run_index

    monkeypatch.setenv("RAG_EMBED_MODEL", HASH_MODEL)

    def make(files: dict[str, str]) -> Path:
        root = make_repo(files)
        run_index(load_settings({"root": str(root)}))
        return root

    return make


SESSION_REPO = {
    "src/sessions.py": '''
        class Session:
            """A connection pool with cookies and default headers."""

            def __init__(self):
                self.cookies = {}
                self.headers = {}

            def close(self):
                self.cookies.clear()
        ''',
    "src/api.py": '''
        from .sessions import Session


        def session():
            """A new Session. Session objects keep cookies; prefer a Session over one-off calls."""
            return Session()


        def request(method, url):
            """Send a request with a throwaway session: session = Session(), session.close()."""
            session = Session()
            try:
                return session
            finally:
                session.close()
        ''',
}


def test_a_symbol_query_ranks_its_definition_first(indexed: Callable[..., Path]) -> None:
    root = indexed(SESSION_REPO)
    fused = _order(root, "Session", rank=False)
    ranked = _order(root, "Session", rank=True)
    # the fusion alone puts a span that only uses the name first (this is what the stage fixes)
    assert fused[0] != ("src/sessions.py", "Session"), fused
    assert ranked[0] == ("src/sessions.py", "Session"), ranked
    assert sorted(fused) == sorted(ranked)  # reordered, nothing added or lost
    # a qualified name finds the method, a function of the same name stays below the class
    assert _order(root, "Session.close", rank=True)[0] == ("src/sessions.py", "Session.close")


README_REPO = {
    "README.md": '''
        # retrykit

        ## Retrying failed requests

        The client retries failed requests with exponential backoff: each retry of a failed
        request waits twice as long as the one before, up to the maximum number of attempts.
        ''',
    "src/retrykit/backoff.py": '''
        import time


        def call_with_backoff(send, attempts=5, base=0.5):
            """Retry send() after a failed request, with exponential backoff."""
            for n in range(attempts):
                try:
                    return send()
                except ConnectionError:
                    time.sleep(base * 2 ** n)
            raise ConnectionError("gave up")
        ''',
    "src/retrykit/client.py": '''
        from .backoff import call_with_backoff


        class Client:
            def get(self, url):
                return call_with_backoff(lambda: self.transport.get(url))
        ''',
}


def test_a_code_question_gets_the_code_before_the_readme(indexed: Callable[..., Path]) -> None:
    root = indexed(README_REPO)
    q = "how does the client retry failed requests with exponential backoff"
    fused = _order(root, q, rank=False)
    ranked = _order(root, q, rank=True)
    assert fused[0][0] == "README.md", fused  # the README restates the question's words
    assert ranked[0][0].startswith("src/retrykit/"), ranked
    # a question that asks for the docs still gets them first
    assert _order(root, "readme section on retrying failed requests", rank=True)[0][0] \
        == "README.md"


def test_intent_reads_names_words_and_docs() -> None:
    q = R.intent("Router")
    assert q.bare and q.names == {"Router"}
    q = R.intent("serde::de::Deserialize")
    assert q.bare and {"serde.de.Deserialize", "Deserialize"} <= q.names
    q = R.intent("where is parse_span_id called from the CLI")
    assert not q.bare and "parse_span_id" in q.names and "CLI" not in q.names
    assert {"parse", "span", "called", "cli"} <= q.words and "where" not in q.words
    assert R.intent("installation guide for the server").docs
    assert not R.intent("how is the server started").docs
    # a question about how the code works is a code question; a user's how-to is not
    assert R.intent("how does the router match a path").code
    assert R.intent("where is the retry delay computed").code
    assert not R.intent("how do I declare a request body").code
    assert not R.intent("JSON request binding").code


def _c(path: str, score: float, start: int = 1, end: int = 10, symbol: str | None = None,
       kind: str = "code", definition: str = "") -> R.Candidate:
    return R.Candidate(path, start, end, kind, symbol, definition, score)


def test_definitions_files_changelogs_and_spread() -> None:
    # an exact definition beats a higher fused score; a type beats a function of the same name
    cands = [_c("src/api.py", 0.60, symbol="session", definition="function"),
             _c("src/use.py", 0.58),
             _c("src/models.py", 0.50, symbol="Session", definition="class")]
    assert [cands[i].path for i in R.rank("Session", cands)][0] == "src/models.py"
    # a changelog that names everything loses to the code
    cands = [_c("CHANGES.md", 0.6, kind="doc"), _c("src/parser.py", 0.5)]
    assert R.rank("which changes in the parser", cands)[0] == 1
    # five spans of one file and one of another: the other file gets a slot in the first two
    cands = [_c("a.py", 0.60 - i / 100, start=1 + 20 * i, end=10 + 20 * i) for i in range(5)]
    cands.append(_c("b.py", 0.55))
    order = R.rank("some question about parsing", cands)
    assert 5 in order[:2]
    # ... unless the spans of one file are adjacent (they are answered as one range)
    adjacent = [_c("a.py", 0.60 - i / 100, start=1 + 10 * i, end=10 + 10 * i) for i in range(5)]
    order = R.rank("some question about parsing", [*adjacent, _c("b.py", 0.50)])
    assert order[:5] == [0, 1, 2, 3, 4]
    # every weight 0: the fusion's order
    assert R.rank("Session", cands, R.OFF) == list(range(len(cands)))


def test_a_plural_file_name_matches_the_word_it_abbreviates() -> None:
    # "utility" names utils.go and "implementations" impls.rs once the plural's s is dropped
    assert P.path_share("pkg/utils.go", R.intent("utility helpers for paths").words) > 0
    assert P.path_share("src/ser/impls.rs", R.intent("standard type implementations").words) > 0
    cands = [_c("src/server.go", 0.60), _c("src/utils.go", 0.57)]
    assert cands[R.rank("utility helpers for paths", cands)[0]].path == "src/utils.go"
    # a word that merely ends in s is not cut to any beginning: "users" is no "use"
    assert not P.word_match("users", "usage")
    assert not P.word_match("bus", "bu")


def test_a_page_of_prose_gets_no_path_credit_from_the_stage() -> None:
    # the page index counts a page's path already; the stage counts it for code only
    pages = [_c("wiki/edit.txt", 0.60, kind="doc"), _c("wiki/users/locked.txt", 0.58, kind="doc")]
    assert R.rank("why is the user account locked", pages)[0] == 0
    code = [_c("src/edit.py", 0.60), _c("src/users/locked.py", 0.58)]
    assert code[R.rank("why is the user account locked", code)[0]].path == "src/users/locked.py"


def test_a_word_in_most_of_the_pools_file_names_earns_no_path_credit() -> None:
    # "schema" names three of the four files (a schema library's vocabulary): it tells none
    # of them apart, so the file the fusion put first keeps its lead
    cands = [_c("v4/core/api.ts", 0.605, start=20, end=40, symbol="_enum", definition="function"),
             _c("v4/classic/schemas.ts", 0.60, start=20, end=40, symbol="ZodEnum",
                definition="interface"),
             _c("v4/mini/schemas.ts", 0.58, start=20, end=40, symbol="enum", definition="function"),
             _c("v4/core/schemas.ts", 0.57, start=20, end=40, symbol="$ZodEnum",
                definition="interface")]
    q = R.intent("enum schema types")
    assert P.telling_words({c.path for c in cands}, q.words) == {"enum", "types"}
    assert cands[R.rank("enum schema types", cands)[0]].path == "v4/core/api.ts"
    # a word that names half of them or fewer still tells them apart
    paths = {"a/router.go", "b/router_test.go", "c/tree.go", "d/mux.go"}
    assert P.telling_words(paths, R.intent("router matching").words) == {"router", "matching"}
    cands[1:3] = [_c("v4/classic/enum.ts", 0.60, start=20, end=40, symbol="ZodEnum",
                     definition="interface"), _c("v4/mini/checks.ts", 0.58)]
    assert cands[R.rank("enum schema types", cands)[0]].path == "v4/classic/enum.ts"


def test_a_how_question_gives_the_file_named_after_its_topic_half_the_path_credit() -> None:
    cands = [_c("src/Gson.java", 0.62), _c("src/TypeAdapterFactory.java", 0.55)]
    # asked what the thing is, the file named after it comes first ...
    assert cands[R.rank("type adapter factories", cands)[0]].path.endswith("Factory.java")
    # ... asked how the code works, the hub that does it keeps its lead
    assert R.intent("how are type adapter factories selected").how
    assert not R.intent("how do I register a type adapter").how
    assert cands[R.rank("how are type adapter factories selected", cands)[0]].path \
        == "src/Gson.java"


def test_a_partial_file_lends_its_evidence_to_its_base_file() -> None:
    cands = [_c("src/Mapper.Rows.cs", 0.60), _c("src/Mapper.Cache.cs", 0.59),
             _c("src/Mapper.cs", 0.58), _c("src/Other.cs", 0.585)]
    order = [cands[i].path for i in R.rank("how rows are mapped and cached", cands)]
    assert order.index("src/Mapper.cs") < order.index("src/Other.cs")


def test_the_base_file_of_partial_files_that_crowd_the_top_leads() -> None:
    # three partial files of one class crowd the top: the base file holds the class's core
    cands = [_c("src/Mapper.Rows.cs", 0.60), _c("src/Mapper.Cache.cs", 0.595),
             _c("src/Mapper.Async.cs", 0.59), _c("src/Other.cs", 0.58),
             _c("src/Mapper.cs", 0.565)]
    query = "how results are read"
    assert cands[R.rank(query, cands)[0]].path == "src/Mapper.cs"
    without = replace(R.DEFAULT, family=0.0)
    assert cands[R.rank(query, cands, without)[0]].path == "src/Mapper.Rows.cs"
    # a test of the file is no partial of it: the file gets no more than its evidence
    tests = [_c("src/mapper_test.go", 0.60), _c("src/mapper_test.go", 0.595, 100, 110),
             _c("src/mapper_test.go", 0.59, 200, 210), _c("src/mapper.go", 0.52)]
    assert R.rank(query, tests, without) == R.rank(query, tests)


def test_a_test_lends_its_evidence_to_the_file_it_is_named_after() -> None:
    # the test's spans crowd the top: the code it tests is the subject, before a file of chance
    cands = [_c("pkg/complete_test.go", 0.60), _c("pkg/complete_test.go", 0.595, 100, 110),
             _c("pkg/complete_test.go", 0.59, 200, 210), _c("pkg/other.go", 0.585),
             _c("pkg/complete.go", 0.58)]
    order = [cands[i].path for i in R.rank("parse the header", cands)]
    assert order.index("pkg/complete.go") < order.index("pkg/other.go")
    pool = ["app/routes.py", "tests/test_routes.py", "src/Router.java", "test/RouterTest.java",
            "m/foo.go", "m/foo_bar_test.go"]
    assert P.subjects("tests/test_routes.py", pool) == ["app/routes.py"]
    assert P.subjects("test/RouterTest.java", pool) == ["src/Router.java"]
    assert P.subjects("m/foo_bar_test.go", pool) == []  # not a test of foo.go


def test_a_test_comes_after_the_code_it_tests() -> None:
    # the test exercises the code in the question's words; the code it tests answers first
    cands = [_c("pkg/command_test.go", 0.60, symbol="TestHooks", definition="function"),
             _c("pkg/command.go", 0.57, symbol="Command.execute", definition="method")]
    assert cands[R.rank("lifecycle hooks run order", cands)[0]].path == "pkg/command.go"
    no_rule = replace(R.DEFAULT, test=0.0)
    assert cands[R.rank("lifecycle hooks run order", cands, no_rule)[0]].path.endswith("_test.go")
    # a query about tests, or a test whose subject is not in the pool, keeps the fusion's order
    assert R.intent("tests of the lifecycle hooks").tests
    assert cands[R.rank("tests of the lifecycle hooks", cands)[0]].path.endswith("_test.go")
    alone = [cands[0], _c("pkg/other.go", 0.57)]
    assert alone[R.rank("lifecycle hooks run order", alone)[0]].path.endswith("_test.go")
    # a page named like a test is no test code
    pages = [_c("advanced/async-tests.md", 0.60, kind="doc"), _c("async.md", 0.57, kind="doc")]
    assert R.rank("Other Asynchronous Function Calls", pages)[0] == 0


def test_a_partial_file_counts_its_familys_answers_in_the_spread() -> None:
    # slices of one partial class are one file's answers; the base file is not their sibling
    cands = [_c("src/Mapper.Rows.cs", 0.62), _c("src/Mapper.Cache.cs", 0.61),
             _c("src/Other.cs", 0.55), _c("src/Mapper.cs", 0.50, start=300, end=340)]
    order = [cands[i].path for i in R.rank("how results are read", cands)]
    assert order[0] == "src/Mapper.Rows.cs"
    assert order.index("src/Other.cs") < order.index("src/Mapper.Cache.cs")
    assert order.index("src/Mapper.cs") < order.index("src/Mapper.Cache.cs")


def test_file_evidence_needs_a_file_that_crowds_the_top() -> None:
    # three of the top spans in one file: the file is the subject, its best span leads
    crowded = [_c("x.py", 0.60), _c("a.py", 0.595), _c("a.py", 0.50, start=100, end=110),
               _c("a.py", 0.45, start=200, end=210)]
    assert crowded[R.rank("parse the header", crowded)[0]].path == "a.py"
    assert crowded[R.rank("parse the header", crowded, replace(R.DEFAULT, file=0.0))[0]].path \
        == "x.py"
    # two spans of a file among the first ten is chance (CoSQA's shards of unrelated snippets)
    scattered = crowded[:3]
    assert scattered[R.rank("parse the header", scattered)[0]].path == "x.py"


def test_a_long_query_gets_less_of_the_stage() -> None:
    assert R.length_scale("retry with backoff", 8) == 1.0
    issue = " ".join(f"word{i}" for i in range(32))
    assert R.length_scale(issue, 8) == pytest.approx((8 / 32) ** 2)
    # a spread that reorders a short question leaves an issue-sized one in the fusion's order
    cands = [_c("a.py", 0.60 - i / 100, start=1 + 20 * i, end=10 + 20 * i) for i in range(3)]
    cands.append(_c("b.py", 0.55))
    assert R.rank("parse the header", cands)[:2] == [0, 3]
    assert R.rank(issue, cands)[:4] == [0, 1, 2, 3]
    # not even scaled down: an issue's answer is often a second span of its first answer's file
    close = [_c("a.py", 0.600), _c("a.py", 0.599, start=40, end=50), _c("b.py", 0.598)]
    issue16 = " ".join(f"word{i}" for i in range(16))
    assert R.rank(issue16, close) == [0, 1, 2]


def test_a_member_of_the_named_type_beats_a_namesake_in_another_case() -> None:
    # `Serialize` asks for the trait: its method outranks another type's `serialize`
    cands = [_c("src/private/ser.rs", 0.60, symbol="Content.serialize", definition="method"),
             _c("src/ser/mod.rs", 0.58, symbol="Serialize.serialize", definition="method")]
    assert cands[R.rank("Serialize", cands)[0]].path == "src/ser/mod.rs"
    assert cands[R.rank("Serialize", cands, replace(R.DEFAULT, member=0.0))[0]].path \
        == "src/private/ser.rs"
    # the definition itself still comes before its members
    cands.append(_c("src/ser/mod.rs", 0.50, start=200, end=260, symbol="Serialize",
                    definition="trait"))
    assert R.rank("Serialize", cands)[0] == 2


def test_examples_come_after_the_code_for_a_code_question() -> None:
    cands = [_c("_examples/rest/main.go", 0.60, symbol="main", definition="function"),
             _c("tree.go", 0.55, symbol="node.findRoute", definition="method")]
    assert cands[R.rank("how are routes matched", cands)[0]].path == "tree.go"
    no_rule = replace(R.DEFAULT, example=0.0)
    assert cands[R.rank("how are routes matched", cands, no_rule)[0]].path.startswith("_ex")
    # a user's how-to may well be answered by an example: the fusion's order stands
    assert cands[R.rank("how do I mount a router", cands)[0]].path.startswith("_ex")


def test_a_file_preamble_comes_after_the_code_for_a_code_question() -> None:
    # a file's nameless first span (imports, a namespace) names the module's words, no answer
    cands = [_c("src/rows.cs", 0.60, start=1, end=5),
             _c("src/reader.cs", 0.58, start=20, end=60, symbol="Reader.Read",
                definition="method")]
    assert cands[R.rank("how are results materialized", cands)[0]].path == "src/reader.cs"
    no_rule = replace(R.DEFAULT, preamble=0.0)
    assert cands[R.rank("how are results materialized", cands, no_rule)[0]].path == "src/rows.cs"
    # a nameless span further down, or a question that is not about code, keeps its place
    later = [replace(cands[0], start_line=40, end_line=45), cands[1]]
    assert later[R.rank("how are results materialized", later)[0]].path == "src/rows.cs"
    assert cands[R.rank("results materialized", cands)[0]].path == "src/rows.cs"


def test_spread_counts_answers_not_spans() -> None:
    # a page of 25 short adjacent sections is one answer (they join into ranges of up to 150
    # lines); counted span by span, the spread pass ended inside it and the page's second range
    # took the next slot unspread, ahead of another page's section
    page = [_c("docker.md", 0.80 - i / 1000, start=1 + 6 * i, end=5 + 6 * i, kind="doc")
            for i in range(25)]
    far = [_c("docker.md", 0.78, start=400 + 6 * i, end=404 + 6 * i, kind="doc") for i in range(3)]
    other = _c("server-workers.md", 0.70, start=127, end=131, kind="doc")
    cands = [*page, *far, other]
    order = R.rank("containers and docker", cands)
    first_far = min(order.index(len(page) + j) for j in range(len(far)))
    assert order.index(len(cands) - 1) < first_far


def test_a_name_defined_elsewhere_is_found_where_it_is_re_exported() -> None:
    # `FromRequest` is defined in another crate: `pub use core::{FromRequest, ...}` is where it
    # enters this one; spans that implement it or name a part of it (`Request`) come after
    reexport = _c("src/extract/mod.rs", 0.55, start=1, end=40)
    cands = [_c("src/json.rs", 0.60, symbol="Json.from_request", definition="method"),
             _c("src/middleware/map_request.rs", 0.59, symbol="Request", definition="type"),
             replace(reexport, exports=frozenset({"FromRef", "FromRequest"}))]
    assert R.rank("FromRequest", cands)[0] == 2
    assert R.rank("FromRequest", [*cands[:2], reexport])[0] != 2  # without its exports
    # a definition in this repository still comes first
    cands.append(_c("src/extract/from_request.rs", 0.50, start=10, end=30, symbol="FromRequest",
                    definition="trait"))
    assert R.rank("FromRequest", cands)[0] == 3
    # and a question in words gives a re-export nothing
    assert R.rank("how are request bodies extracted", cands[:3])[0] != 2
