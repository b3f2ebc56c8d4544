"""The optional rerank stage: plumbing with an injected scorer, clear errors without a model, and
a real cross-encoder built from the bundled model's weights (its head is untrained: only the
plumbing is tested, never the quality)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from rag_mcp.config import load_settings
from rag_mcp.deps import Deps, build_deps
from rag_mcp.errors import InvalidArgument
from rag_mcp.search.records import QueryParams
from rag_mcp.search.rerank import CrossEncoderReranker, load_cross_encoder, pair_text
from rag_mcp.search.retrieve import Filters

HASH_MODEL = "test-hash-64"


class LongestText:
    """A scorer that prefers long span texts: an order the fusion would not produce."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def predict(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> list[float]:
        self.seen.extend(pairs)
        return [float(len(text)) for _, text in pairs]


@pytest.fixture
def indexed(sample_repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from indexers.pipeline import run_index

    monkeypatch.setenv("RAG_EMBED_MODEL", HASH_MODEL)
    run_index(load_settings({"root": str(sample_repo)}))
    return sample_repo


@pytest.fixture
def deps_for(indexed: Path) -> Iterator:
    opened: list[Deps] = []

    def make(**over: object) -> Deps:
        d = build_deps(load_settings({"root": str(indexed), **over}))
        opened.append(d)
        return d

    yield make
    for d in opened:
        d.close()


def test_reranker_reorders_by_the_scorer_and_keeps_calibrated_scores(deps_for) -> None:
    deps = deps_for()
    scorer = LongestText()
    rr = CrossEncoderReranker("fake", deps.repo().handle, loader=lambda _m: scorer)
    hits = deps.repo().retriever.retrieve("span id parsing", Filters()).hits[:6]
    out = rr("span id parsing", hits)
    assert sorted(h.span.id for h in out) == sorted(h.span.id for h in hits)
    texts = {pair[1]: pair for pair in scorer.seen}
    lengths = [len(pair_text(h, deps.repo().handle.get().catalog.text(h.row.sid) or ""))
               for h in out]
    assert lengths == sorted(lengths, reverse=True) and len(texts) == len(hits)
    assert {h.span.id: h.score for h in out} == {h.span.id: h.score for h in hits}
    # the pair text names the span and carries its code
    parse = next(p for _, p in scorer.seen if "parse_span_id" in p)
    assert parse.startswith("src/app/spans.py parse_span_id\n") and "rsplit" in parse
    assert rr("q", hits[:1]) == hits[:1]  # nothing to reorder: the model is not needed


def test_rag_query_reranks_only_when_asked(deps_for) -> None:
    deps = deps_for(reranker_model="fake")
    scorer = LongestText()
    reranker = deps.repo().reranker
    assert isinstance(reranker, CrossEncoderReranker)
    reranker._loader = lambda _m: scorer  # the model a user would name, injected
    plain = deps.queries.query(QueryParams("retry with backoff", k=5, tau=0.0))
    assert scorer.seen == [] and "rerank_ms" not in plain.timings
    ranked = deps.queries.query(QueryParams("retry with backoff", k=5, tau=0.0, rerank=True))
    assert "rerank_ms" in ranked.timings and scorer.seen
    assert [h.id for h in ranked.hits] != [h.id for h in plain.hits]


def test_rerank_without_a_model_is_an_invalid_argument(deps_for) -> None:
    deps = deps_for()
    with pytest.raises(InvalidArgument, match="RAG_RERANKER_MODEL"):
        deps.queries.query(QueryParams("retry", rerank=True))
    missing = deps_for(reranker_model="no-such/cross-encoder-model")
    for _ in range(2):  # remembered: the second call does not try to load again
        with pytest.raises(InvalidArgument, match="not on this machine") as err:
            missing.queries.query(QueryParams("retry", rerank=True))
        assert "reranker model 'no-such/cross-encoder-model'" in err.value.message
    folder = deps_for(reranker_model=str(Path(__file__).parent))  # a folder, not a model
    with pytest.raises(InvalidArgument, match="not a sentence-transformers model folder"):
        folder.queries.query(QueryParams("retry", rerank=True))


@pytest.mark.slow
def test_a_real_cross_encoder_from_the_bundled_weights(deps_for) -> None:
    scorer = load_cross_encoder("all-MiniLM-L6-v2")
    # spans apart (join_gap -1), so the answer is the reranked order itself
    deps = deps_for(reranker_model="all-MiniLM-L6-v2", rerank="true", rerank_candidates="4",
                    join_gap="-1")
    reranker = deps.repo().reranker
    assert isinstance(reranker, CrossEncoderReranker)
    reranker._loader = lambda _m: scorer  # load once for the test, through the real loader
    q = "split a span id into path and lines"
    fused = deps.repo().retriever.retrieve(q, Filters()).hits[:4]
    ans = deps.queries.query(QueryParams(q, k=4, tau=0.0))  # query.rerank = true: reranked
    catalog = deps.repo().handle.get().catalog
    pairs = [(q, pair_text(h, catalog.text(h.row.sid) or "")) for h in fused]
    own = [float(s) for s in scorer.predict(pairs)]
    expected = [fused[i].span.id for i in sorted(range(4), key=lambda i: (-own[i], i))]
    assert [h.id for h in ans.hits] == expected
    assert "rerank_ms" in ans.timings
