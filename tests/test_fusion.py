"""The fused score: BM25's upper bound, the convex combination and its calibration, the weight
of long queries and of prose spans, the fusion modes of the retriever, and the user's tau over
the calibrated default."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rag_mcp.config import load_settings
from rag_mcp.deps import Deps, build_deps
from rag_mcp.embed.catalog import DEFAULT
from rag_mcp.errors import InvalidArgument
from rag_mcp.index.lexical import LexicalIndex, tokenize
from rag_mcp.search.fusion import (
    CALIBRATIONS,
    FALLBACK,
    PROSE_KINDS,
    Calibration,
    calibration_for,
    fuse,
    lexical_trust,
    logistic,
    query_alpha,
    rrf,
)

HASH_MODEL = "test-hash-64"


def test_upper_bound_is_never_reached_and_ignores_unknown_terms(tmp_path: Path) -> None:
    lx = LexicalIndex(tmp_path / "lex", create=True)
    docs = ["retry the request with backoff", "parse the span id", "retry retry retry",
            "open a file", "close the socket"]
    for sid, text in enumerate(docs):
        lx.add(sid, tokenize(text), tokenize(f"src/mod{sid}.py fn{sid}"))
    lx.commit()
    query = tokenize("retry request zzzunknown")
    for boost in (0.0, 0.5, 2.0):
        bound = lx.upper_bound(query, name_boost=boost)
        hits = lx.search(query, 10, name_boost=boost)
        assert hits and all(0 < bm < bound for _, bm in hits)
    # idf by hand: N = 5; "retry" in 2 bodies, "request" in 1; the unknown term adds nothing
    idf = [math.log(1 + (5 - df + 0.5) / (df + 0.5)) for df in (2, 1)]
    assert lx.upper_bound(query, name_boost=0.0) == pytest.approx(2.2 * sum(idf))
    assert lx.upper_bound(tokenize("zzzunknown"), name_boost=0.0) == 0.0
    # the name field counts with its weight ("src" and "py" are in every name)
    with_name = lx.upper_bound(tokenize("src retry"), name_boost=0.5)
    assert with_name > lx.upper_bound(tokenize("src retry"), name_boost=0.0)
    body_only = lx.search(query, 10, field="body")
    assert {sid for sid, _ in body_only} == {0, 2}


def test_convex_fusion_is_calibrated_and_monotone() -> None:
    cal = calibration_for("sentence-transformers/all-MiniLM-L6-v2")
    assert cal is CALIBRATIONS["all-MiniLM-L6-v2"] and 0 < cal.alpha < 1
    assert calibration_for("some-other-model") is FALLBACK and FALLBACK.tau == 0.0
    raw, score = fuse(0.5, 0.4, cal)  # a code span
    assert raw == pytest.approx(cal.alpha * 0.5 + (1 - cal.alpha) * 0.4)
    assert score == pytest.approx(1 / (1 + math.exp(-(cal.a * raw + cal.b))))
    grid = [fuse(c / 10, lx / 10, cal) for c in range(11) for lx in range(11)]
    by_raw = sorted(grid)
    assert [s for _, s in by_raw] == sorted(s for _, s in by_raw)  # same order, raw or score
    assert all(0.0 < s < 1.0 for _, s in grid)
    assert logistic(-800.0) == 0.0 and logistic(800.0) == 1.0  # no overflow


def test_long_queries_weight_the_lexical_leg_more() -> None:
    cal = CALIBRATIONS["all-MiniLM-L6-v2"]
    t = int(cal.terms)
    assert query_alpha(cal, 1) == query_alpha(cal, t) == cal.alpha
    alphas = [query_alpha(cal, n) for n in (t, t + 1, 2 * t, 10 * t)]
    assert alphas == sorted(alphas, reverse=True) and alphas[-1] == pytest.approx(cal.alpha / 10)
    # a paraphrase that shares no words against a span that shares many of the query's words
    para, words = (0.8, 0.02), (0.5, 0.3)
    short = [fuse(c, lx, cal, n_terms=5, best_cos=0.8)[0] for c, lx in (para, words)]
    long = [fuse(c, lx, cal, n_terms=10 * t, best_cos=0.8)[0] for c, lx in (para, words)]
    assert short[0] > short[1] and long[1] > long[0]
    # within a query the order is the query's weight's; the best cosine only shifts the scale
    a_q = alphas[-1]
    for c, lx in (para, words):
        raw, score = fuse(c, lx, cal, 10 * t, 0.8)
        assert raw == pytest.approx(a_q * c + (1 - a_q) * lx + (cal.alpha - a_q) * 0.8)
        assert score == pytest.approx(logistic(cal.a * raw + cal.b))
    assert fuse(0.5, 0.3, cal, 5, 0.8) == fuse(0.5, 0.3, cal, 5, 0.1)  # short: no shift at all
    # the best hit of a long query is scored at least as a fixed alpha would score it, so the
    # calibrated threshold does not drop every hit of a long query
    best_long = fuse(0.8, 0.08, cal, 10 * t, 0.8)[1]
    assert best_long >= fuse(0.8, 0.08, cal)[1] > cal.tau


def test_prose_spans_weight_the_lexical_leg_more_than_code_spans() -> None:
    for cal in (CALIBRATIONS["all-MiniLM-L6-v2"], FALLBACK):
        assert cal.alpha_prose is not None and cal.alpha_prose < cal.alpha
        assert {cal.alpha_for(k) for k in PROSE_KINDS} == {cal.alpha_prose}
        assert cal.alpha_for("code") == cal.alpha
        # the same evidence: a paraphrase (high cosine, few shared words) and a span that
        # shares the question's words (lower cosine, high BM25)
        para, words = (0.7, 0.1), (0.4, 0.6)
        code = [fuse(c, lx, cal, kind="code")[0] for c, lx in (para, words)]
        doc = [fuse(c, lx, cal, kind="doc")[0] for c, lx in (para, words)]
        assert doc[1] - doc[0] > code[1] - code[0]  # words count for more in prose
        assert doc[1] > code[1] and doc[0] < code[0]
        assert fuse(0.5, 0.5, cal, kind="doc") == pytest.approx(fuse(0.5, 0.5, cal, kind="code"))
        # the length rule and its constant apply to each kind's own weight
        n = 10 * int(cal.terms)
        assert query_alpha(cal, n, "text") == pytest.approx(cal.alpha_prose / 10)
        a_q = query_alpha(cal, n, "doc")
        raw = fuse(0.3, 0.2, cal, n, 0.8, kind="doc")[0]
        assert raw == pytest.approx(a_q * 0.3 + (1 - a_q) * 0.2 + (cal.alpha_prose - a_q) * 0.8)
    # without a prose weight every kind gets alpha, as before the split
    one = Calibration(alpha=0.6, a=1.0, b=0.0, tau=0.0, source="test", terms=12)
    assert {one.alpha_for(k) for k in ("code", "doc", "text")} == {0.6}
    assert fuse(0.7, 0.1, one, 20, 0.9, kind="doc") == fuse(0.7, 0.1, one, 20, 0.9, kind="code")


def test_rrf_counts_each_leg() -> None:
    assert rrf(0, 0) == pytest.approx(2 / 61)
    assert rrf(None, 4) == pytest.approx(1 / 65)
    assert rrf(None, None) == 0.0
    assert rrf(0, None, w_dense=2.0) == pytest.approx(2 / 61)


@pytest.fixture
def retriever_for(sample_repo: Path, monkeypatch: pytest.MonkeyPatch
                  ) -> Iterator[Callable[..., Deps]]:
    from indexers.pipeline import run_index

    monkeypatch.setenv("RAG_EMBED_MODEL", HASH_MODEL)
    run_index(load_settings({"root": str(sample_repo)}))
    opened: list[Deps] = []

    def make(**over: object) -> Deps:
        deps = build_deps(load_settings({"root": str(sample_repo), **over}))
        opened.append(deps)
        return deps

    yield make
    for d in opened:
        d.close()


def without_pages(r: Any) -> None:
    """The retriever ``r`` with its calibration's page weight at 0: the fusion alone."""
    ships = r.calibration
    r.calibration = lambda idx: replace(ships(idx), page=0.0)


def test_fusion_modes_order_by_their_own_evidence(retriever_for: Callable[..., Deps]) -> None:
    from rag_mcp.search.retrieve import Filters

    deps = retriever_for(rank=False)  # the fusion's own order (the ranking stage: test_rank)
    r = deps.repo().retriever
    q = "retry the call with exponential backoff"
    fused = r.retrieve(q, Filters(), fusion="convex").hits
    assert fused and all(0.0 <= h.lex <= 1.0 and 0.0 < h.score < 1.0 for h in fused)
    assert [h.raw for h in fused] == sorted((h.raw for h in fused), reverse=True)
    assert fused[0].span.symbol == "retry"
    dense = r.retrieve(q, Filters(), fusion="dense").hits
    assert all(h.raw == h.cos and h.lex_rank is None for h in dense)
    lexical = r.retrieve(q, Filters(), fusion="lexical").hits
    assert all(h.raw == h.bm25 and h.dense_rank is None for h in lexical)
    assert [h.bm25 for h in lexical] == sorted((h.bm25 for h in lexical), reverse=True)
    rrf_hits = r.retrieve(q, Filters(), fusion="rrf").hits
    assert {h.span.id for h in rrf_hits} == {h.span.id for h in fused}
    # whatever orders the hits, the score is the calibrated default fusion's
    by_id = {h.span.id: h.score for h in fused}
    assert all(by_id[h.span.id] == h.score for h in rrf_hits)
    with pytest.raises(InvalidArgument, match="fusion must be one of"):
        r.retrieve(q, Filters(), fusion="magic")


def test_retriever_weights_long_queries_by_their_length(
        retriever_for: Callable[..., Deps]) -> None:
    from rag_mcp.search.retrieve import Filters

    r = retriever_for(rank=False).repo().retriever  # the fusion's own order
    without_pages(r)  # page evidence: test_pages
    short = "retry with backoff"
    long = ("when the remote server answers with an error status the client should retry the "
            "call with exponential backoff sleeping between tries then parse the span id split "
            "into path and line range and compute a checksum hex digest of the payload bytes")
    assert len(set(tokenize(short))) < FALLBACK.terms < len(set(tokenize(long)))
    for q in (short, long):
        res = r.retrieve(q, Filters())
        cal, n = res.calibration, len(set(tokenize(q)))
        best = max(h.cos for h in res.hits)
        for h in res.hits:
            alpha, a_q = cal.alpha_for(h.span.kind), query_alpha(cal, n, h.span.kind)
            assert (a_q == alpha) == (q == short)
            want = a_q * h.cos + (1 - a_q) * h.lex + (alpha - a_q) * best
            assert h.raw == pytest.approx(want)
        assert [h.raw for h in res.hits] == sorted((h.raw for h in res.hits), reverse=True)


def test_lexical_weight_follows_the_share_of_query_terms_the_index_knows() -> None:
    cal = calibration_for(DEFAULT)
    assert lexical_trust(0.0) == 0.0 and lexical_trust(1.0) == lexical_trust(0.5) == 1.0
    assert lexical_trust(0.1) == pytest.approx(0.2)
    for kind in ("code", "doc"):
        alpha = cal.alpha_for(kind)
        assert fuse(0.6, 0.9, cal, 5, 0.8, kind, trust=1.0) == fuse(0.6, 0.9, cal, 5, 0.8, kind)
        # no trust: the cosine alone orders, on the convex scale (a perfect span still scores 1)
        assert fuse(0.6, 0.9, cal, 5, 0.8, kind, trust=0.0)[0] == pytest.approx(0.6)
        half = fuse(0.6, 0.9, cal, 5, 0.8, kind, trust=0.5)[0]
        assert half == pytest.approx(0.6 + (1 - alpha) * 0.5 * (0.9 - 0.6))
        # long queries keep their constant: the trust only moves BM25's share to the cosine
        n = int(10 * cal.terms)
        a_q = query_alpha(cal, n, kind)
        raw = fuse(0.6, 0.2, cal, n, 0.8, kind, trust=0.5)[0]
        w = (1 - a_q) * 0.5
        assert raw == pytest.approx((1 - w) * 0.6 + w * 0.2 + (alpha - a_q) * 0.8)


def test_retriever_leans_on_the_cosine_when_the_index_lacks_the_query_words(
        retriever_for: Callable[..., Deps]) -> None:
    from rag_mcp.search.retrieve import Filters, known_share

    r = retriever_for(rank=False).repo().retriever  # the fusion's own order
    without_pages(r)  # page evidence: test_pages
    # a German question: only "retry" is in the index, so BM25 would rank on that word alone
    german = "wie wiederhole ich den aufruf mit retry nach einem fehler"
    english = "retry the call with exponential backoff"
    for q, known, trust in ((german, 0.1, 0.2), (english, 1.0, 1.0)):
        res = r.retrieve(q, Filters())
        assert known_share(res.index.lexical, tokenize(q)) == pytest.approx(known)
        assert any(h.lex > 0 for h in res.hits)
        for h in res.hits:
            w = (1 - res.calibration.alpha_for(h.span.kind)) * trust
            assert h.raw == pytest.approx((1 - w) * h.cos + w * h.lex)
        assert [h.raw for h in res.hits] == sorted((h.raw for h in res.hits), reverse=True)


def test_retriever_weights_each_candidate_by_its_span_kind(
        retriever_for: Callable[..., Deps]) -> None:
    from rag_mcp.search.retrieve import Filters

    r = retriever_for(rank=False).repo().retriever  # the fusion's own order
    without_pages(r)  # page evidence: test_pages
    q = "install the demo and start the service"
    split = r.retrieve(q, Filters())
    cal = split.calibration
    assert cal.alpha_prose is not None and cal.alpha_prose != cal.alpha
    assert {h.span.kind for h in split.hits} >= {"code", "doc", "text"}
    r.calibration = lambda idx: replace(cal, alpha_prose=None)  # type: ignore[method-assign]
    one = {h.span.id: h for h in r.retrieve(q, Filters()).hits}
    assert one.keys() == {h.span.id for h in split.hits}
    for h in split.hits:
        same = one[h.span.id]
        assert (h.cos, h.lex) == (same.cos, same.lex)
        if h.span.kind == "code":
            assert h.raw == same.raw
        else:  # doc and text spans: the lexical leg weighs (1 - alpha_prose) instead
            assert h.raw == pytest.approx(cal.alpha_prose * h.cos + (1 - cal.alpha_prose) * h.lex)
            assert (h.raw > same.raw) == (h.lex > h.cos)
    assert [h.raw for h in split.hits] == sorted((h.raw for h in split.hits), reverse=True)


def test_dense_candidates_get_their_bm25_from_a_deeper_lexical_list(
        retriever_for: Callable[..., Deps]) -> None:
    from rag_mcp.search.retrieve import Filters

    deps = retriever_for()
    r = deps.repo().retriever
    r.POOL = 1  # one candidate a leg: the lexical list is read 4 deep for their BM25
    q = "fetch user parse config"  # the hash model's top span is BM25's 2nd to 4th
    hits = r.retrieve(q, Filters()).hits
    deep = dict(deps.repo().handle.get().lexical.search(tokenize(q), r.POOL * r.LEX_LOOKUP))
    assert len(hits) == 2 and len(deep) > 2
    assert all(h.bm25 == deep.get(h.row.sid, 0.0) for h in hits)
    # the dense candidate is not the lexical leg's pick, yet it carries its own BM25
    assert any(h.lex_rank is None and h.bm25 > 0 and h.lex > 0 for h in hits)


def test_query_tau_setting_overrides_the_calibrated_default(
        retriever_for: Callable[..., Deps]) -> None:
    from rag_mcp.search.records import QueryParams

    auto = retriever_for()
    model_tau = calibration_for(HASH_MODEL).tau
    assert auto.queries.query(QueryParams("retry with backoff")).tau == model_tau
    fixed = retriever_for(tau="0.99")
    ans = fixed.queries.query(QueryParams("retry with backoff", k=5))
    assert ans.tau == 0.99 and ans.low_confidence and ans.returned == 1
    # an explicit tau on the call still wins
    assert fixed.queries.query(QueryParams("retry with backoff", tau=0.0)).tau == 0.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.slow
@pytest.mark.anyio
async def test_rag_query_without_tau_applies_the_calibrated_default(
        sample_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end with the default model: omitting tau means the fitted row's tau, not 0. The
    default model's row ships tau = 0 (the flag says when nothing is relevant), so the row is
    given the tau another fitted row carries to see the threshold at work."""
    from indexers.pipeline import run_index
    from tests.mcp_helpers import answer, in_process

    fitted = [c.tau for c in CALIBRATIONS.values() if c.tau > 0]
    assert fitted, "no calibration row carries a threshold"
    monkeypatch.setitem(CALIBRATIONS, DEFAULT, replace(CALIBRATIONS[DEFAULT], tau=max(fitted)))

    # spans apart: a hit under tau never joins its neighbours, so with joining on the two
    # answers also differ in how they group the same spans (tests/test_join.py)
    settings = load_settings({"root": str(sample_repo), "join_gap": "-1"})
    assert settings.tau is None  # configs/default.toml says "auto"
    assert run_index(settings).published
    cal = CALIBRATIONS[DEFAULT]
    assert cal.tau > 0 and "provisional" not in cal.source
    async with in_process(settings) as (session, _):
        query = {"query": "compute a checksum of the payload bytes", "k": 10}
        auto = answer(await session.call_tool("rag_query", query))
        zero = answer(await session.call_tool("rag_query", {**query, "tau": 0.0}))
    assert auto["tau"] == cal.tau and zero["tau"] == 0.0
    # the threshold did work: what it dropped is exactly what tau = 0 returned beyond it
    assert auto["dropped_by_tau"] > 0 and zero["dropped_by_tau"] == 0
    assert auto["returned"] + auto["dropped_by_tau"] \
        == zero["returned"] + zero["cut_by_budget"]
    assert all(h["score"] >= cal.tau for h in auto["hits"])
    assert any(h["score"] < cal.tau for h in zero["hits"])
    assert [h["id"] for h in auto["hits"]] == [h["id"] for h in zero["hits"]][:auto["returned"]]


def test_code_in_test_files_loses_the_test_penalty(make_repo: Callable[..., Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from indexers.pipeline import run_index
    from rag_mcp.search.retrieve import Filters

    monkeypatch.setenv("RAG_EMBED_MODEL", HASH_MODEL)
    body = '''
        def parse_retry_header(value):
            """Seconds to wait from a Retry-After header."""
            return int(value.strip())
        '''
    root = make_repo({
        "src/retry.py": body,
        "tests/test_retry.py": body.replace("def parse_", "def test_parse_"),
        "web/retry.spec.ts": "export function parseRetryHeader(value) { return Number(value) }\n",
        "docs/tests/retry.md": "# Retry header\n\nparse retry header value seconds wait\n",
        "src/lib.rs": (
            "/// Seconds to wait from a Retry-After header.\n"
            "pub fn parse_retry_header(value: &str) -> u64 {\n"
            "    value.trim().parse().unwrap()\n}\n\n"
            "#[cfg(test)]\nmod tests {\n    use super::*;\n\n"
            "    #[test]\n    fn parse_retry_header_value_seconds() {\n"
            "        assert_eq!(parse_retry_header(\" 5 \"), 5);\n    }\n}\n"),
    })
    run_index(load_settings({"root": str(root)}))
    plain = build_deps(load_settings({"root": str(root), "test_penalty": "0"})).repo().retriever
    tilted = build_deps(load_settings({"root": str(root)})).repo().retriever
    penalty = load_settings({"root": str(root)}).test_penalty
    assert penalty > 0  # the default

    def raws(r: object, q: str, filters: Filters | None = None) -> dict[str, float]:
        return {h.span.path: h.raw for h in r.retrieve(q, filters or Filters()).hits}  # type: ignore[attr-defined]

    def by_label(r: object, q: str) -> dict[tuple[str, str], float]:
        return {(h.span.path, h.span.label): h.raw
                for h in r.retrieve(q, Filters()).hits}  # type: ignore[attr-defined]

    q = "parse the retry header value into seconds"
    before, after = by_label(plain, q), by_label(tilted, q)
    assert before.keys() == after.keys() >= {
        ("src/retry.py", "parse_retry_header"),
        ("tests/test_retry.py", "test_parse_retry_header"),
        ("src/lib.rs", "parse_retry_header"),
        ("src/lib.rs", "tests.parse_retry_header_value_seconds"),
        ("docs/tests/retry.md", "Retry header")}
    assert any(p == "web/retry.spec.ts" for p, _ in before)
    for (path, label), raw in before.items():
        # code under tests/, named like a test or in Rust's `mod tests` loses the penalty;
        # prose never does
        lost = path in ("tests/test_retry.py", "web/retry.spec.ts") or label.startswith("tests.")
        assert after[(path, label)] == pytest.approx(raw - penalty if lost else raw), path
    # a short question about tests, and a path filter, leave the order alone
    for q2, filters in (("tests for the retry header parser", None),
                        (q, Filters.build(path="tests/**"))):
        assert raws(tilted, q2, filters) == pytest.approx(raws(plain, q2, filters))
    # an issue-sized text that says "test" in passing still prefers the code under test
    issue = ("when the server sends a retry after header with spaces the client crashes while "
             "parsing it; my test shows int() failing on the value; expected seconds to wait "
             "before the next request, got a ValueError traceback from the header parser")
    assert len(set(tokenize(issue))) > FALLBACK.terms
    b, a = raws(plain, issue), raws(tilted, issue)
    assert a["tests/test_retry.py"] == pytest.approx(b["tests/test_retry.py"] - penalty)


def test_test_paths() -> None:
    from rag_mcp.index.spans import is_test_code, is_test_file, is_test_path

    for rel in ("tests/test_x.py", "pkg/x_test.go", "src/x.test.js", "src/x.spec.ts",
                "spec/models/user_spec.rb", "src/test/java/a/FooTest.java", "a/FooTests.cs",
                "conftest.py", "testing/python/approx.py", "web/__tests__/app.js"):
        assert is_test_path(rel), rel
    for rel in ("src/retry.py", "src/contest.py", "src/latest.py", "src/testimony.py",
                "lib/attestation.go", "docs/guide.md", "src/spectrum.ts"):
        assert not is_test_path(rel), rel
    assert is_test_file("tests/test_x.py") and not is_test_file("tests/helpers.py")
    assert is_test_path("tests/helpers.py")
    # Rust keeps unit tests in the source file, in `mod tests`: its items are test code
    assert is_test_code("src/parse.rs", "tests.parses_empty")
    assert is_test_code("src/parse.rs", "test.Helper.new")
    assert is_test_code("tests/it.rs", "main")
    for symbol in ("parse", "Parser.test", "test", "tests", "testing.helper", None):
        assert not is_test_code("src/parse.rs", symbol), symbol
