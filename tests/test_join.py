"""Adjacent hits of one file answered as one range: the plan, then rag_query and rag_get_span."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.index.spans import Span, digest, make_span_id
from rag_mcp.search.join import (
    Placed,
    best_window,
    defines,
    focus,
    grow_head,
    joined_label,
    plan_joins,
)
from rag_mcp.search.rank import intent
from tests.mcp_helpers import answer, error_code, in_process, text

HASH = "test-hash-64"


def plan(hits: list[tuple[str, int, int] | tuple[str, int, int, bool]], k: int = 5,
         gap: int = 3, max_lines: int = 150) -> list[list[int]]:
    return plan_joins([Placed(*h) for h in hits], k, gap=gap, max_lines=max_lines)


def test_neighbours_join_behind_the_best_ranked() -> None:
    # b.py:21-30 follows a.py:10-20 by line number only: another file never joins
    assert plan([("a", 10, 20), ("b", 21, 30), ("a", 23, 30)]) == [[0, 2], [1]]
    assert plan([("a", 10, 20), ("a", 1, 9)]) == [[0, 1]]  # touching, before it
    assert plan([("a", 10, 20), ("a", 15, 25)]) == [[0, 1]]  # overlapping


def test_gap_and_size_limits() -> None:
    assert plan([("a", 10, 20), ("a", 24, 30)], gap=3) == [[0, 1]]  # lines 21-23 between
    assert plan([("a", 10, 20), ("a", 25, 30)], gap=3) == [[0], [1]]  # four lines between
    assert plan([("a", 10, 20), ("a", 21, 30)], gap=-1) == [[0], [1]]  # joining off
    assert plan([("a", 1, 100), ("a", 101, 150)], max_lines=150) == [[0, 1]]
    assert plan([("a", 1, 100), ("a", 101, 151)], max_lines=150) == [[0], [1]]


def test_a_hit_under_tau_neither_joins_nor_takes_others() -> None:
    assert plan([("a", 10, 20), ("a", 21, 30, False)]) == [[0], [1]]
    assert plan([("a", 10, 20, False), ("a", 21, 30)]) == [[0], [1]]


def test_k_groups_and_the_scan_stops_at_the_kth() -> None:
    hits = [("a", 1, 5), ("b", 1, 5), ("a", 6, 9), ("c", 1, 5), ("b", 6, 9), ("d", 1, 5),
            ("c", 6, 9)]
    # the neighbour of "a" ranked third joins and frees a slot for "c"; with three groups the
    # scan goes on while hits join them ("b"'s neighbour) and stops at the first that cannot
    # ("d"), so "c"'s neighbour, ranked below "d", stays out
    assert plan(hits, k=3) == [[0, 2], [1, 4], [3]]
    assert plan(hits, k=1) == [[0]]  # "b" needs a second group: stop
    assert plan(hits, k=2) == [[0, 2], [1]]
    assert plan(hits, k=9) == [[0, 2], [1, 4], [3, 6], [5]]  # fewer hits than slots


def test_a_joined_label_names_every_part_once_in_line_order() -> None:
    assert joined_label(["send", None, "json", "send"], ", ") == "send, json"
    assert joined_label(["A > B", "A > C"], "; ") == "A > B; A > C"
    assert joined_label([None, None], ", ") is None


def test_a_growing_range_takes_in_the_group_it_reaches() -> None:
    # 1-10 and 21-30 are apart; 11-20 bridges them: one group, led by the best-ranked hit
    assert plan([("a", 21, 30), ("a", 1, 10), ("a", 11, 20)]) == [[0, 2, 1]]
    assert plan([("a", 1, 10), ("b", 1, 5), ("a", 21, 30), ("a", 11, 20)], k=3) == [
        [0, 3, 2], [1]]
    # ... but not past the size limit
    assert plan([("a", 1, 10), ("a", 21, 30), ("a", 11, 20)], max_lines=25) == [[0, 2], [1]]


# -- through the server ------------------------------------------------------------------------

GUIDE = """# Guide

## Alpha

The zebrafish tuning knob sets how often the zebrafish tuning loop runs.

## Beta

Zebrafish tuning also reads the tuning table when the zebrafish loop starts.
"""
pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def guide(make_repo) -> Settings:  # type: ignore[no-untyped-def]
    root = make_repo({"docs/guide.md": GUIDE,
                      "docs/other.md": "# Gamma\n\nUnrelated words about deployment.\n",
                      "src/other.py": "def other():\n    return 1\n"})
    s = load_settings({"root": str(root), "embed_model": HASH})
    run_index(s)
    return s


def lines(root: str, a: int, b: int) -> str:
    return "\n".join((Path(root) / "docs/guide.md").read_text().split("\n")[a - 1:b])


async def test_rag_query_joins_adjacent_sections_and_rag_get_span_reads_them(
        guide: Settings) -> None:
    async with in_process(guide) as (session, _):
        r = await session.call_tool("rag_query", {"query": "zebrafish tuning", "k": 3,
                                                  "tau": 0.0, "include_text": True})
        sc = answer(r)
        top = sc["hits"][0]
        assert (top["path"], top["start_line"], top["end_line"]) == ("docs/guide.md", 1, 9)
        assert top["joins"] == 2 and "(joins 2 spans)" in text(r)
        # the range names both sections it spans, and its preview says what the lead's is
        assert sorted(top["heading"].split("; ")) == ["Guide > Alpha", "Guide > Beta"]
        lead = top["heading"].split("; ")[0]  # the best-ranked part's label comes first
        assert top["preview"] == ("The zebrafish tuning knob sets how often the zebrafish tuning "
                                  "loop runs." if lead == "Guide > Alpha" else
                                  "Zebrafish tuning also reads the tuning table when the "
                                  "zebrafish loop starts.")
        assert top["text"] == lines(guide.root, 1, 9)
        assert top["id"] == make_span_id("docs/guide.md", 1, 9, digest(lines(guide.root, 1, 9)))
        assert all(h["joins"] == 0 for h in sc["hits"][1:])
        assert sc["tokens_returned"] >= len(top["text"].encode()) // 4  # the joined range

        g = await session.call_tool("rag_get_span", {"span_id": top["id"], "context_lines": 1})
        gs = g.structured_content
        assert gs is not None and not g.is_error
        assert (gs["start_line"], gs["end_line"], gs["stale"]) == (1, 9, False)
        assert gs["text"] == lines(guide.root, 1, 9)  # context stops at both ends of the file

        forged = make_span_id("docs/guide.md", 3, 9, "0" * 12)
        bad = await session.call_tool("rag_get_span", {"span_id": forged})
        assert bad.is_error and error_code(bad) == "E_NOT_FOUND"
        # a range no indexed spans fill is not a span either
        bad = await session.call_tool(
            "rag_get_span", {"span_id": make_span_id("docs/guide.md", 4, 9, "0" * 12)})
        assert bad.is_error and error_code(bad) == "E_NOT_FOUND"

        guide_md = Path(guide.root) / "docs/guide.md"
        guide_md.write_text("<!-- moved down two lines -->\n\n" + GUIDE)
        moved = await session.call_tool("rag_get_span", {"span_id": top["id"]})
        ms = moved.structured_content
        assert ms is not None and not moved.is_error
        assert (ms["start_line"], ms["stale"]) == (3, True)
        assert ms["text"] == lines(guide.root, 3, 11) and ms["id"] != top["id"]
        again = await session.call_tool("rag_get_span", {"span_id": ms["id"]})  # the new ID
        ag = again.structured_content
        assert ag is not None and not again.is_error
        assert (ag["id"], ag["start_line"], ag["text"]) == (ms["id"], 3, ms["text"])
        guide_md.write_text(GUIDE.replace("also reads", "now writes"))
        changed = await session.call_tool("rag_get_span", {"span_id": top["id"]})
        assert changed.is_error and error_code(changed) == "E_STALE"


async def test_a_smaller_k_is_the_beginning_of_a_larger_one(make_repo) -> None:  # type: ignore[no-untyped-def]
    # ranked: Alpha, then the other page, then Beta (Alpha's neighbour): with k = 1 the
    # neighbour still joins, because the groups are planned for the largest k
    root = make_repo({
        "docs/guide.md": "# Guide\n\n## Alpha\n\nzebrafish tuning loop, zebrafish tuning "
                         "loop, the knob.\n\n## Beta\n\nA zebrafish note.\n",
        "docs/other.md": "# Other\n\nThe zebrafish tuning loop, elsewhere.\n",
    })
    s = load_settings({"root": str(root), "embed_model": HASH})
    run_index(s)
    async with in_process(s) as (session, _):
        answers = []
        for k in (1, 2, 5):
            r = await session.call_tool("rag_query", {"query": "zebrafish tuning loop",
                                                      "k": k, "tau": 0.0})
            answers.append([(h["path"], h["start_line"], h["end_line"], h["joins"])
                            for h in answer(r)["hits"]])
    assert answers[2][1][0] == "docs/other.md"  # the ranking this test is about
    assert answers[0][0] == ("docs/guide.md", 1, 9, 2)
    assert answers[0] == answers[1][:1] and answers[1] == answers[2][:2]


async def test_join_gap_minus_one_returns_the_spans_apart(guide: Settings) -> None:
    s = load_settings({"root": guide.root, "embed_model": HASH, "join_gap": "-1"})
    async with in_process(s) as (session, _):
        r = await session.call_tool("rag_query", {"query": "zebrafish tuning", "k": 3,
                                                  "tau": 0.0})
        sc = answer(r)
        got = sorted((h["start_line"], h["end_line"]) for h in sc["hits"][:2])
        assert got == [(1, 5), (7, 9)] and all(h["joins"] == 0 for h in sc["hits"])


async def test_a_part_changed_on_disk_keeps_the_hits_apart(guide: Settings) -> None:
    (Path(guide.root) / "docs/guide.md").write_text(GUIDE.replace("also reads", "now writes"))
    async with in_process(guide) as (session, _):
        r = await session.call_tool("rag_query", {"query": "zebrafish tuning", "k": 3,
                                                  "tau": 0.0})
        sc = answer(r)
        assert all(h["joins"] == 0 for h in sc["hits"])
        assert {(h["start_line"], h["end_line"]) for h in sc["hits"][:2]} == {(1, 5), (7, 9)}


# -- focus: answers after the first narrowed to the lines that matter ----------------------------

def test_focus_grows_from_the_best_part_while_the_range_stays_short() -> None:
    def f(*hits: tuple[int, int], max_lines: int = 30) -> tuple[int, int]:
        return focus([Placed("a", s, e) for s, e in hits], gap=3, max_lines=max_lines)

    assert f((40, 55), (30, 38), (57, 70)) == (30, 55)  # the second best first, then no room
    assert f((40, 55), (57, 69), (30, 38)) == (40, 69)
    assert f((40, 55), (90, 99)) == (40, 55)  # out of reach: a bridge never ranked
    assert f((40, 120), (121, 130)) == (40, 120)  # the best part alone is longer: as it is
    assert f((40, 55), (57, 70), max_lines=200) == (40, 70)


def test_best_window_holds_most_of_the_query_terms() -> None:
    body = [f"    step_{i} = step_{i - 1} + {i}" for i in range(100)]
    body[61] = "    tuning = zebrafish_tuning(step_60)"
    at = best_window(body, "where is zebrafish tuning", 20)
    assert at <= 61 < at + 20
    assert best_window(body, "nothing here matches", 20) == 0  # keeps the signature's end
    assert best_window(body[:10], "zebrafish", 20) == 0


def test_a_definition_the_question_names_is_not_narrowed() -> None:
    trace = ('File "seaborn/_core/scales.py", line 351, in ContinuousBase._setup\n'
             "TypeError: numpy boolean subtract")
    names = intent(trace).names
    assert defines("ContinuousBase._setup", names)
    assert defines("Nominal._setup", names)  # the method's name alone, as a traceback gives it
    assert defines("Plot._plot, ContinuousBase._setup", names)  # any part of a joined label
    assert not defines("ContinuousBase._setup_scales", names)
    assert not defines("ContinuousBase", names)  # the class is not the method it holds
    assert not defines(None, names)
    assert defines("Session.send", intent("why does Session.send drop the proxy").names)
    # a plain word is not a name: "send" in a sentence leaves send() free to narrow
    assert not defines("Session.send", intent("why does send drop the proxy").names)


# short lines: the chunker's pieces of it run to ~70 lines each
LONG_BODY = "\n".join(
    ["def build_pipeline(config):", '    """Build every stage of the pipeline."""',
     "    v0 = config.start"]
    + [f"    v{i} = f(v{i - 1}, {i})" for i in range(1, 200)]
    + ["    return v199", ""])


def _with_phrase(text: str, at: int, phrase: str) -> str:
    rows = text.split("\n")
    rows[at - 1] = f"    {phrase}"
    return "\n".join(rows)


async def test_a_fourth_hit_in_a_long_function_is_the_window_that_matches(make_repo) -> None:  # type: ignore[no-untyped-def]
    # the first three answers come whole; a later one over focus_lines (30) is narrowed
    phrase = "flush_marmot_cache(v99)  # marmot cache flushed here"
    long_py = _with_phrase(LONG_BODY, 103, phrase)
    root = make_repo({
        "src/long.py": long_py,
        "src/marmot.py": ("def flush_marmot_cache(value):\n"
                          '    """Flush the marmot cache: every marmot cache entry goes."""\n'
                          "    marmot_cache.clear()  # the marmot cache\n"
                          "    return value\n"),
        "src/marmot_io.py": ("def save_marmot_cache(path):\n"
                             '    """Write the marmot cache before a flush."""\n'
                             "    return dump(marmot_cache, path)\n"),
        "src/marmot_log.py": ("def log_marmot_cache(cache):\n"
                              '    """Log what the marmot cache holds before a flush."""\n'
                              "    return print(marmot_cache)\n"),
    })
    s = load_settings({"root": str(root), "embed_model": HASH})
    run_index(s)
    whole = load_settings({"root": str(root), "embed_model": HASH, "focus_lines": "0"})
    async with in_process(whole) as (session, _):
        r = answer(await session.call_tool("rag_query", {"query": "flush marmot cache", "k": 5,
                                                         "tau": 0.0}))
    ranked = [h["id"].split(":")[0] for h in r["hits"]]
    assert ranked[3] == "src/long.py" and "src/long.py" not in ranked[:3]  # this test's
    start, end = map(int, r["hits"][3]["id"].split(":")[1].split("-"))
    assert end - start + 1 > 30
    async with in_process(s) as (session, _):
        r = answer(await session.call_tool("rag_query", {"query": "flush marmot cache", "k": 5,
                                                         "tau": 0.0, "include_text": True}))
        hit = r["hits"][3]
        assert hit["id"].startswith("src/long.py:") and hit["joins"] == 1  # cuts one span
        start, end = map(int, hit["id"].split(":")[1].split("-"))
        assert end - start + 1 <= 30 and start <= 103 <= end
        assert phrase in hit["text"] and hit["symbol"] == "build_pipeline"
        rows = long_py.split("\n")
        assert hit["text"] == "\n".join(rows[start - 1:end])
        assert hit["id"] == make_span_id("src/long.py", start, end, digest(hit["text"]))
        g = await session.call_tool("rag_get_span", {"span_id": hit["id"], "context_lines": 2})
        gs = g.structured_content
        assert gs is not None and not g.is_error
        assert (gs["start_line"], gs["end_line"], gs["stale"]) == (start, end, False)
        assert gs["text"] == "\n".join(rows[start - 3:end + 2])
        forged = make_span_id("src/long.py", start, end, "0" * 12)
        bad = await session.call_tool("rag_get_span", {"span_id": forged})
        assert bad.is_error and error_code(bad) == "E_NOT_FOUND"


# -- a type asked for by name comes with its first members ---------------------------------------

def _span(start: int, end: int, symbol: str | None, parent: str | None = None) -> Span:
    return Span("a.js", start, end, f"d{start}", "code", "javascript", symbol, parent)


def test_a_types_head_grows_over_its_members_while_the_range_stays_short() -> None:
    head = _span(14, 21, "Axios")
    spans = [_span(1, 12, None), head, _span(22, 28, "Axios.constructor", "Axios"),
             _span(30, 61, "Axios.request", "Axios"), _span(63, 70, "helper")]
    assert grow_head(head, 21, spans, set(), 30) == [spans[2]]
    assert grow_head(head, 21, spans, set(), 60) == spans[2:4]  # never past the type's end
    assert grow_head(head, 21, spans, set(), 10) == []  # the first member alone is too long
    assert grow_head(head, 21, spans, {spans[2].id}, 60) == []  # another answer holds it
    assert grow_head(head, 28, spans, set(), 60) == [spans[3]]  # after the group's own end


CLASS_JS = """import InterceptorManager from './InterceptorManager.js';

/**
 * Create a new instance of Tapir
 */
class Tapir {
  constructor(instanceConfig) {
    this.defaults = instanceConfig;
    this.interceptors = new InterceptorManager();
  }

  request(configOrUrl, config) {
    const step0 = this.dispatch(configOrUrl, config, 0);
    const step1 = this.dispatch(configOrUrl, config, 1);
    const step2 = this.dispatch(configOrUrl, config, 2);
    const step3 = this.dispatch(configOrUrl, config, 3);
    const step4 = this.dispatch(configOrUrl, config, 4);
    const step5 = this.dispatch(configOrUrl, config, 5);
    const step6 = this.dispatch(configOrUrl, config, 6);
    const step7 = this.dispatch(configOrUrl, config, 7);
    const step8 = this.dispatch(configOrUrl, config, 8);
    const step9 = this.dispatch(configOrUrl, config, 9);
    const step10 = this.dispatch(configOrUrl, config, 10);
    const step11 = this.dispatch(configOrUrl, config, 11);
    const step12 = this.dispatch(configOrUrl, config, 12);
    const step13 = this.dispatch(configOrUrl, config, 13);
    const step14 = this.dispatch(configOrUrl, config, 14);
    const step15 = this.dispatch(configOrUrl, config, 15);
    const step16 = this.dispatch(configOrUrl, config, 16);
    const step17 = this.dispatch(configOrUrl, config, 17);
    const step18 = this.dispatch(configOrUrl, config, 18);
    const step19 = this.dispatch(configOrUrl, config, 19);
    const step20 = this.dispatch(configOrUrl, config, 20);
    const step21 = this.dispatch(configOrUrl, config, 21);
    const step22 = this.dispatch(configOrUrl, config, 22);
    const step23 = this.dispatch(configOrUrl, config, 23);
    const step24 = this.dispatch(configOrUrl, config, 24);
    return step24;
  }
}

export default Tapir;
"""


async def test_a_class_asked_for_by_name_comes_with_its_constructor(make_repo) -> None:  # type: ignore[no-untyped-def]
    # more files than the retriever's pool that say "tapir" more than the constructor does:
    # the constructor is no candidate of its own (so it joins no answer), as in a big repository
    files = {f"lib/zoo{i}.js": f"export function feed{i}() {{\n  return 'tapir tapir tapir';\n}}\n"
             for i in range(60)}
    root = make_repo({"lib/Tapir.js": CLASS_JS, **files})
    s = load_settings({"root": str(root), "embed_model": HASH})
    run_index(s)
    async with in_process(s) as (session, _):
        r = await session.call_tool("rag_query", {"query": "Tapir", "k": 3, "tau": 0.0,
                                                  "include_text": True})
        top = answer(r)["hits"][0]
        # the head (doc comment, `class Tapir {`) and the constructor, not the next method
        assert (top["path"], top["end_line"]) == ("lib/Tapir.js", 10)
        assert top["start_line"] in (1, 3)  # with the imports above when they ranked
        assert top["symbol"].endswith("Tapir, Tapir.constructor")
        assert "this.defaults = instanceConfig;" in top["text"]
        got = await session.call_tool("rag_get_span", {"span_id": top["id"]})
        gs = got.structured_content
        assert gs is not None and not got.is_error and gs["text"] == top["text"]
        # a question that does not name the class keeps the head as it is
        r = await session.call_tool("rag_query", {"query": "create a new instance",
                                                  "k": 3, "tau": 0.0})
        assert all(h["end_line"] != 10 or h["start_line"] != 3 for h in answer(r)["hits"])
