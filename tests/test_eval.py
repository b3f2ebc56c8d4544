"""rag-eval: the metrics on hand-computed cases, query-file checking, the docstring starter set,
and an end-to-end run on a fixture repository."""

from __future__ import annotations

import ast
import math
import shutil
from pathlib import Path

import orjson
import pytest

from rag_mcp.errors import InvalidArgument
from rag_mcp.eval.metrics import LineSpan, cost, is_match, mean, score_query
from rag_mcp.eval.sets import (
    docstring_set,
    first_sentence,
    is_library_path,
    parse_queries,
    strip_docstrings,
)

FIXTURE = Path(__file__).parent / "fixtures" / "eval"
HASH_MODEL = "test-hash-64"


def S(path: str, start: int, end: int) -> LineSpan:
    return LineSpan(path, start, end)


# -- metrics ------------------------------------------------------------------------------------

def test_relevance_needs_the_same_path_and_half_the_gold_lines() -> None:
    gold = S("a.py", 10, 19)  # 10 lines: 5 must be covered
    assert is_match(S("a.py", 15, 30), gold)  # covers 15-19: exactly half
    assert not is_match(S("a.py", 16, 30), gold)  # 4 of 10
    assert is_match(S("a.py", 1, 100), gold)  # contains it
    assert is_match(S("a.py", 12, 16), gold)
    assert not is_match(S("b.py", 10, 19), gold)
    assert not is_match(S("a.py", 20, 40), gold)  # touching is not overlapping
    assert is_match(S("a.py", 16, 30), gold, min_overlap=0.0)  # the any-overlap variant


def test_paths_are_normalised_and_reversed_ranges_fixed() -> None:
    assert LineSpan.of({"path": ".\\src\\a.py", "start_line": 9, "end_line": 3}) \
        == S("src/a.py", 3, 9)
    assert LineSpan.of({"path": "./b.py", "start_line": "4", "end_line": 4}).path == "b.py"


def test_one_gold_found_at_rank_three() -> None:
    gold = [S("a.py", 10, 19)]
    results = [S("b.py", 1, 100), S("a.py", 12, 14), S("a.py", 15, 30), S("c.py", 1, 2)]
    m = score_query(gold, results)
    assert m["MRR@10"] == pytest.approx(1 / 3)
    assert (m["hit@1"], m["hit@3"], m["hit@5"], m["hit@10"]) == (0.0, 1.0, 1.0, 1.0)
    assert m["P@1"] == 0.0 and m["P@3"] == pytest.approx(1 / 3)
    assert m["recall@5"] == 1.0
    assert m["nDCG@10"] == pytest.approx(1 / math.log2(4))  # gain at rank 3, ideal rank 1
    assert m["lines@5"] == 100 + 19 + 2  # b 1-100, a 12-30 (overlaps counted once), c 1-2


def test_each_gold_is_credited_once_in_ndcg() -> None:
    gold = [S("a.py", 1, 4), S("b.py", 1, 4)]
    results = [S("a.py", 1, 4), S("a.py", 1, 3), S("b.py", 2, 4)]
    m = score_query(gold, results)
    dcg = 1.0 + 0.0 + 1 / math.log2(4)
    idcg = 1.0 + 1 / math.log2(3)
    assert m["nDCG@10"] == pytest.approx(dcg / idcg)
    assert m["recall@1"] == 0.5 and m["recall@3"] == 1.0
    assert m["P@3"] == 1.0  # a duplicate hit is still a relevant result
    assert m["MRR@10"] == 1.0


def test_only_the_top_ten_count_and_no_results_scores_zero() -> None:
    gold = [S("a.py", 1, 2)]
    late = [S("x.py", i, i) for i in range(1, 11)] + [S("a.py", 1, 2)]
    assert score_query(gold, late)["hit@10"] == 0.0
    empty = score_query(gold, [])
    assert empty["MRR@10"] == 0.0 and empty["nDCG@10"] == 0.0 and empty["lines@5"] == 0.0


def test_file_level_ranks_files_by_their_first_result() -> None:
    gold = [S("a.py", 50, 60), S("a.py", 70, 80)]
    results = [S("b.py", 1, 2), S("b.py", 5, 6), S("a.py", 1, 1)]
    m = score_query(gold, results, file_level=True)
    assert m["MRR@10"] == 0.5  # files: b, a
    assert m["recall@5"] == 1.0  # one gold file, found


def test_token_cost_counts_covered_lines_and_whole_files() -> None:
    files = {"a.py": ["x" * 7] * 10, "b.py": ["yyy"] * 4}  # 8 and 4 characters a line
    c = cost([S("a.py", 1, 2), S("a.py", 2, 3), S("b.py", 1, 1), S("zz.py", 1, 1)], files.get)
    assert c["tok@5"] == (3 * 8 + 4) / 4  # a.py lines 1-3 once, b.py line 1; unknown file: 0
    assert c["file_tok@5"] == (10 * 8 + 4 * 4) / 4


def test_mean_divides_by_every_query() -> None:
    rows = [{"MRR@10": 1.0, "hit@1": 1.0}, {"MRR@10": 0.5, "hit@1": 0.0}]
    assert mean(rows) == {"MRR@10": 0.75, "hit@1": 0.5}
    assert mean(rows, n=4)["MRR@10"] == 0.375  # two queries of four had no results


# -- query files --------------------------------------------------------------------------------

def test_query_file_problems_name_their_lines() -> None:
    lines = [
        '{"id": "a", "query": "ok", "gold": [{"path": "x.py", "start_line": 1, "end_line": 2}]}',
        "{not json",
        '{"id": "b", "query": "no gold"}',
        "",
        '{"id": "a", "query": "dup", "gold": [{"path": "x.py", "start_line": 1, "end_line": 1}]}',
        '{"id": "c", "query": "q", "gold": [{"path": "x.py", "start_line": 5, "end_line": 2}]}',
        '["a list"]',
        '{"id": "d", "query": " ", "gold": [{"path": "x.py", "start_line": 1, "end_line": 1}]}',
        '{"id": "e", "query": "q", "gold": [{"path": "x.py", "start_line": 0, "end_line": 1}]}',
    ]
    with pytest.raises(InvalidArgument) as err:
        parse_queries(lines, "q.jsonl")
    msg = err.value.message
    assert msg.startswith("q.jsonl: line 2: not valid JSON")
    for expected in ("line 3: 'gold' must be a non-empty list",
                     "line 5: duplicate id 'a' (first on line 1)",
                     "line 6: gold[0].end_line (2) is before start_line (5)",
                     "line 7: expected a JSON object", "line 8: 'query' must be",
                     "line 9: gold[0].start_line must be an integer >= 1"):
        assert expected in msg
    assert "line 1:" not in msg and "line 4:" not in msg


def test_query_file_keeps_extra_fields_and_rejects_an_empty_file() -> None:
    qs = parse_queries((FIXTURE / "queries.jsonl").read_text().splitlines())
    assert [q.id for q in qs] == ["q1", "q2", "q3", "q4"]
    assert qs[1].extra == {"lib": "text"} and len(qs[3].gold) == 2
    assert qs[1].to_json()["lib"] == "text"
    with pytest.raises(InvalidArgument, match="no queries"):
        parse_queries(["", "  "], "empty.jsonl")


# -- the docstring starter set -------------------------------------------------------------------

def test_first_sentence_unwraps_markup() -> None:
    assert first_sentence("Return the :class:`Response` object.  More text.") \
        == "Return the Response object"
    assert first_sentence("\n    Build a ``Session``\n    for the client.\n\n    Details.") \
        == "Build a Session for the client"
    assert first_sentence("Is it v1.2 or not? Yes.") == "Is it v1.2 or not?"


def test_stripping_keeps_line_numbers_and_valid_python() -> None:
    src = (FIXTURE / "repo" / "pkg" / "shapes.py").read_text()
    out, docs = strip_docstrings(src)
    ast.parse(out)
    assert out.count("\n") == src.count("\n")
    assert '"""' not in out and "shoelace formula" not in out
    assert out.split("\n")[6:10] == ["", "", "", ""]  # circle_area's docstring: blank lines
    assert out.split("\n")[0] == ""  # the module docstring
    found = {d.name: (d.query, d.start_line, d.end_line) for d in docs}
    assert found == {
        "circle_area": ("Compute the area of a circle from its radius", 6, 13),
        "rectangle_perimeter": ("Return the perimeter of an axis-aligned rectangle", 16, 19),
        "Polygon.shoelace_area": ("Measure the enclosed surface with the shoelace formula",
                                  29, 35),
    }  # not __init__ (dunder), test_like_name, stub (trivial), nor the class itself


def test_docstring_only_bodies_and_inline_docstrings_stay_valid() -> None:
    src = 'def f():\n    """Only a docstring."""\n\n\ndef g(x): "Inline doc."; return x\n'
    out, _ = strip_docstrings(src)
    ast.parse(out)
    assert out == "def f():\n    pass\n\n\ndef g(x): ...; return x\n"


def test_docstring_set_skips_tests_merges_and_checks_leaks() -> None:
    repo = FIXTURE / "repo"
    files = {str(p.relative_to(repo)): p.read_text() for p in repo.rglob("*.py")}
    files["pkg/copy.py"] = ('def word_count_again(text):\n    """Count the words in a piece of '
                            'text."""\n    words = text.split()\n    n = len(words)\n'
                            '    return n\n')
    files["pkg/leak.py"] = ('# Turn a title into a lower-case URL slug with dashes\n'
                            'X = 1\n')
    stripped, queries = docstring_set(files, limit=50)
    assert set(stripped) == set(files)
    by_text = {q.query: q for q in queries}
    assert "Check the area of the unit circle against pi" not in by_text  # a test file
    assert "Turn a title into a lower-case URL slug with dashes" not in by_text  # leaked
    merged = by_text["Count the words in a piece of text"]
    assert {g.path for g in merged.gold} == {"pkg/text.py", "pkg/copy.py"}
    assert len(queries) == 4 and len({q.id for q in queries}) == 4
    assert docstring_set(files, limit=2)[1] == docstring_set(files, limit=2)[1]  # stable
    assert len(docstring_set(files, limit=2)[1]) == 2


def test_library_paths() -> None:
    assert is_library_path("src/pkg/a.py")
    assert not is_library_path("tests/a.py") and not is_library_path("pkg/test_a.py")
    assert not is_library_path("docs/conf.py") and not is_library_path("conftest.py")
    for test_file in ("pkg/a_test.go", "lib/a.test.js", "lib/a.spec.ts", "lib/a_spec.rb",
                      "src/FooTest.java", "src/FooTests.cs"):
        assert not is_library_path(test_file), test_file
    assert is_library_path("src/latest.py") and is_library_path("lib/contest.js")


# -- rag-eval end to end ------------------------------------------------------------------------

@pytest.fixture
def indexed_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from indexers.pipeline import run_index
    from rag_mcp.config import load_settings

    root = tmp_path / "repo"
    shutil.copytree(FIXTURE / "repo", root)
    monkeypatch.setenv("RAG_EMBED_MODEL", HASH_MODEL)
    stats = run_index(load_settings({"root": str(root)}))
    assert stats.published
    return root


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from indexers.eval_cli import main

    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_rag_eval_reports_the_kit_metrics_and_writes_a_run_file(
        indexed_fixture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run.jsonl"
    code, out, err = run_cli([str(FIXTURE / "queries.jsonl"), "--root", str(indexed_fixture),
                              "--json", "--out", str(run)], capsys)
    assert code == 0, err
    summary = orjson.loads(out)
    assert summary["queries"] == 4 and summary["k"] == 10 and summary["errors"] == 0
    for key in ("MRR@10", "hit@1", "hit@3", "hit@5", "hit@10", "nDCG@10", "tok@5",
                "file_tok@5", "tokens_top5_vs_files", "latency_ms_p50", "latency_ms_p95"):
        assert key in summary
    assert summary["hit@10"] == 1.0  # every gold is among the fixture's 12 spans
    rows = [orjson.loads(x) for x in run.read_bytes().splitlines()]
    assert [r["id"] for r in rows] == ["q1", "q2", "q3", "q4"]
    first = rows[0]["results"][0]
    assert set(first) >= {"path", "start_line", "end_line", "id", "score"}
    # the run file scores the same with our scorer as the summary says
    from rag_mcp.eval.sets import load_queries

    qs = {q.id: q for q in load_queries(FIXTURE / "queries.jsonl")}
    mrr = [score_query(qs[r["id"]].gold, [LineSpan.of(x) for x in r["results"]])["MRR@10"]
           for r in rows]
    assert summary["MRR@10"] == pytest.approx(sum(mrr) / 4, abs=1e-4)
    assert summary["missed"] == 0 and summary["missed_queries"] == []


def test_rag_eval_lists_missed_queries_in_text_mode(
        indexed_fixture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    q = tmp_path / "q.jsonl"
    q.write_text('{"id": "nowhere", "query": "rectangle perimeter", "gold": '
                 '[{"path": "pkg/missing.py", "start_line": 1, "end_line": 3}]}\n')
    code, out, _ = run_cli([str(q), "--root", str(indexed_fixture), "--k", "3"], capsys)
    assert code == 0
    assert "1 queries, k=3" in out and "MRR@10 0.000" in out
    assert "missed (1; no relevant span in the top 3)" in out
    assert "nowhere: 'rectangle perimeter' wants pkg/missing.py:1-3, got pkg/shapes.py" in out


def test_rag_eval_bad_query_file_exits_2_with_the_line(
        indexed_fixture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    q = tmp_path / "bad.jsonl"
    q.write_text('{"id": "a", "query": "x", "gold": []}\n')
    code, out, err = run_cli([str(q), "--root", str(indexed_fixture)], capsys)
    assert code == 2 and out == ""
    assert err.startswith("rag-eval: E_INVALID_ARGUMENT: bad.jsonl: line 1: 'gold'")
    code, _, err = run_cli([str(tmp_path / "none.jsonl"), "--root", str(indexed_fixture)],
                           capsys)
    assert code == 2 and "does not exist" in err


def test_rag_eval_without_an_index_says_how_to_build_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    code, _, err = run_cli([str(FIXTURE / "queries.jsonl"), "--root", str(root)], capsys)
    assert code == 5 and "E_INDEX_UNAVAILABLE" in err and "rag-index --root" in err


def test_rag_eval_docstrings_hides_them_and_cleans_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "repo"
    shutil.copytree(FIXTURE / "repo", root)
    monkeypatch.setenv("RAG_EMBED_MODEL", HASH_MODEL)
    saved = tmp_path / "questions.jsonl"
    code, out, err = run_cli(["--docstrings", "--root", str(root), "--json",
                              "--save-queries", str(saved)], capsys)
    assert code == 0, err
    summary = orjson.loads(out)
    assert summary["queries"] == 5 and summary["errors"] == 0
    questions = [orjson.loads(x) for x in saved.read_bytes().splitlines()]
    assert {q["name"] for q in questions} >= {"circle_area", "Polygon.shoelace_area"}
    # gold lines are those of the user's own files
    circle = next(q for q in questions if q["name"] == "circle_area")
    assert circle["gold"] == [{"path": "pkg/shapes.py", "start_line": 6, "end_line": 13}]
    # the stripped copy's index is gone; the embedding cache stays for the next run
    rag = root / ".rag"
    assert [p.name for p in rag.iterdir() if p.is_dir()] == []
    assert (rag / "embcache.sqlite").exists()
    assert (root / "pkg" / "shapes.py").read_text() \
        == (FIXTURE / "repo" / "pkg" / "shapes.py").read_text()  # the user's files untouched


def test_rag_eval_help_says_what_it_measures_and_the_file_format(
        capsys: pytest.CaptureFixture[str]) -> None:
    from indexers.eval_cli import main

    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rag-eval")
    for words in ("MRR@10", "--docstrings", '"gold": [{"path"', "at least half of the gold lines",
                  "--tau", "'auto'", "exit codes"):
        assert words in out


def test_rag_eval_tau_is_a_number_in_range_or_auto(capsys: pytest.CaptureFixture[str]) -> None:
    from indexers.eval_cli import build_parser

    parse = build_parser().parse_args
    assert parse(["q.jsonl"]).tau == 0.0  # the ranking itself, by default
    assert parse(["q.jsonl", "--tau", "auto"]).tau is None  # rag_query's calibrated default
    assert parse(["q.jsonl", "--tau", "0.3"]).tau == 0.3
    for bad in ("1.5", "high"):
        with pytest.raises(SystemExit) as done:
            parse(["q.jsonl", "--tau", bad])
        assert done.value.code == 2
    assert "argument --tau" in capsys.readouterr().err
