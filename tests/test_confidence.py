"""Honest confidence: the query's lexical coverage in every hit's score, the model's flag
threshold for low_confidence, and a low-confidence note that fits the corpus."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from rag_mcp.config import load_settings
from rag_mcp.deps import build_deps
from rag_mcp.index.lexical import BM25_K1, LexicalIndex, tokenize
from rag_mcp.search.fusion import (
    CALIBRATIONS,
    FALLBACK,
    coverage_shift,
    shift_score,
)
from rag_mcp.search.query import low_confidence_note, mostly_prose
from rag_mcp.search.records import QueryParams
from rag_mcp.search.retrieve import Filters, lexical_coverage

HASH_MODEL = "test-hash-64"
MINILM = CALIBRATIONS["all-MiniLM-L6-v2"]


def test_coverage_counts_the_terms_the_corpus_lacks(tmp_path: Path) -> None:
    lx = LexicalIndex(tmp_path / "lex", create=True)
    docs = ["retry the request with backoff", "parse the span id", "open a file"]
    for sid, text in enumerate(docs):
        lx.add(sid, tokenize(text), tokenize(f"src/mod{sid}.py"))
    lx.commit()
    assert lexical_coverage(lx, tokenize("retry the request")) == 1.0
    present = lx.upper_bound(tokenize("retry request"))
    rarest = (1 + lx.NAME_BOOST) * math.log(1 + 3.5 / 0.5) * (BM25_K1 + 1)
    one = lexical_coverage(lx, tokenize("retry request sourdough"))
    assert one == pytest.approx(present / (present + rarest))
    two = lexical_coverage(lx, tokenize("retry request sourdough bread"))
    assert 0 < two < one < 1
    assert lexical_coverage(lx, tokenize("bake sourdough bread")) == 0.0
    # a frame word the corpus has does not make an off-topic question covered
    assert lexical_coverage(lx, tokenize("how do I open sourdough bread")) < 0.5


def test_the_coverage_shift_lowers_every_score_and_keeps_their_order() -> None:
    assert coverage_shift(MINILM, 1.0) == 0.0 and coverage_shift(FALLBACK, 0.1) == 0.0
    shift = coverage_shift(MINILM, 0.25)
    assert shift == pytest.approx(MINILM.coverage_weight * math.log(0.25)) and shift < 0
    scores = [0.6, 0.2, 0.05, 0.021, 0.001]
    shifted = [shift_score(s, shift) for s in scores]
    assert all(b < a for a, b in zip(scores, shifted, strict=True))
    assert shifted == sorted(shifted, reverse=True)
    assert shift_score(0.3, 0.0) == 0.3
    # a query with no known term is far under any threshold, not -inf
    assert 0.0 < shift_score(0.5, coverage_shift(MINILM, 0.0)) < MINILM.tau


def test_the_flag_threshold_is_never_under_tau() -> None:
    assert MINILM.flag is not None and MINILM.flag_threshold >= MINILM.tau
    assert replace(MINILM, flag=None).flag_threshold == MINILM.tau
    assert replace(MINILM, flag=0.001).flag_threshold == MINILM.tau
    assert FALLBACK.flag_threshold == FALLBACK.tau == 0.0


def test_retrieval_scores_carry_the_coverage(sample_repo: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from indexers.pipeline import run_index

    monkeypatch.setenv("RAG_EMBED_MODEL", HASH_MODEL)
    run_index(load_settings({"root": str(sample_repo)}))
    deps = build_deps(load_settings({"root": str(sample_repo)}))
    try:
        r = deps.repo().retriever
        cal = replace(FALLBACK, coverage_weight=1.0, tau=0.0)
        plain = replace(cal, coverage_weight=0.0)
        for q, covered in (("retry with exponential backoff", True),
                           ("retry with exponential backoff sourdough bread", False)):
            r.calibration = lambda idx, c=plain: c  # type: ignore[method-assign,misc]
            before = r.retrieve(q, Filters())
            r.calibration = lambda idx, c=cal: c  # type: ignore[method-assign,misc]
            after = r.retrieve(q, Filters())
            assert (after.coverage == 1.0) == covered and before.coverage == after.coverage
            assert [h.span.id for h in after.hits] == [h.span.id for h in before.hits]
            shift = math.log(after.coverage)
            for a, b in zip(after.hits, before.hits, strict=True):
                assert a.raw == b.raw
                assert a.score == pytest.approx(shift_score(b.score, shift))
                assert (a.score < b.score) == (not covered)
    finally:
        deps.close()


@pytest.mark.parametrize(("files", "prose"), [
    ({"src/a.py": "def retry(fn):\n    return fn()\n",
      "src/b.py": "def parse(x):\n    return x\n"}, False),
    ({"wiki/start.md": "# Start\n\nWelcome to the wiki.\n\n## Rules\n\nBe kind.\n",
      "wiki/faq.txt": "Questions people ask about the wiki.\n"}, True),
])
def test_a_low_confidence_answer_is_flagged_under_the_bar_with_advice_for_its_corpus(
        make_repo: Callable[..., Path], monkeypatch: pytest.MonkeyPatch,
        files: dict[str, str], prose: bool) -> None:
    from indexers.pipeline import run_index

    monkeypatch.setenv("RAG_EMBED_MODEL", HASH_MODEL)
    root = make_repo(files)
    run_index(load_settings({"root": str(root)}))
    deps = build_deps(load_settings({"root": str(root), "join_gap": "-1"}))
    try:
        r = deps.repo().retriever
        assert mostly_prose([r.handle.get().manifest]) is prose
        q = "retry the wiki rules" if not prose else "kind rules of the wiki"
        # tau keeps every hit, the flag threshold is above the best: flagged, hits kept
        r.calibration = lambda idx: replace(FALLBACK, tau=0.0, flag=0.999)  # type: ignore[method-assign]
        flagged = deps.queries.query(QueryParams(q, k=5))
        assert flagged.low_confidence and flagged.returned > 1 and flagged.dropped_by_tau == 0
        assert flagged.message is not None and "this corpus may not answer" in flagged.message
        words = "words the pages use" if prose else "names from the code"
        assert words in flagged.message
        assert ("names from the code" in flagged.message) is not prose
        # the caller's tau replaces the bar
        assert not deps.queries.query(QueryParams(q, k=5, tau=0.0)).low_confidence
        # a bar the best hit reaches: not flagged, no note
        r.calibration = lambda idx: replace(FALLBACK, tau=0.0, flag=0.0)  # type: ignore[method-assign]
        ok = deps.queries.query(QueryParams(q + " again", k=5))
        assert not ok.low_confidence and ok.message is None
        # nothing reaches tau: the best guess alone, flagged, with the same advice
        r.calibration = lambda idx: replace(FALLBACK, tau=0.999)  # type: ignore[method-assign]
        guess = deps.queries.query(QueryParams(q + " once more", k=5))
        assert guess.low_confidence and guess.returned == 1
        assert guess.message is not None and "tau=1.00" in guess.message
        assert words in guess.message
    finally:
        deps.close()


def test_the_note_says_what_fits_the_corpus() -> None:
    code = low_confidence_note(0.01, 0.02, True, prose=False)
    wiki = low_confidence_note(0.01, 0.02, True, prose=True)
    assert "names from the code" in code and "names from the code" not in wiki
    assert "page title" in wiki and "0.010" in wiki
    assert mostly_prose([{"by_kind": {"doc": 3, "code": 1}}, {"by_kind": {"code": 1}}])
    assert not mostly_prose([{"by_kind": {"doc": 3, "code": 4}}, {}])


@pytest.mark.slow
def test_off_topic_questions_are_flagged_with_the_bundled_model(sample_repo: Path) -> None:
    """The fitted row, end to end: questions the demo repository cannot answer are flagged;
    questions in its own words are not."""
    from indexers.pipeline import run_index

    settings = load_settings({"root": str(sample_repo)})
    assert run_index(settings).published
    deps = build_deps(settings)
    try:
        for q in ("How do I bake sourdough bread at home?",
                  "What is the capital of Australia?",
                  "how long should I boil an egg",
                  "who painted the Mona Lisa"):
            assert deps.queries.query(QueryParams(q)).low_confidence, q
        for q in ("split a span ID into its path and line range",
                  "call fn again with exponential backoff",
                  "HTTPError status"):
            assert not deps.queries.query(QueryParams(q)).low_confidence, q
    finally:
        deps.close()
