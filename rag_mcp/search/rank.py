"""The ranking stage: what a code search engine knows about a candidate and an embedding does not.

The fusion (``search.fusion``) scores each candidate span alone, by its cosine and its BM25. A
code search engine knows more: which identifier a query names and which span *defines* it, what
kind of definition that is, which file a span lives in and how much of the pool that file holds,
whether the query asks about documentation or about code, and that ten answers from ten places
beat ten slices of one file. This stage adds that evidence to the fused score of the pool's
candidates and reorders them; the calibrated score each hit carries (and so ``tau``) stays the
fusion's, as with the cross-encoder (``search.rerank``).

Every rule is about the query's words and the candidate's name, kind and path; none knows a
repository, a language or a query. The weights are on the scale of the fused score (a
cosine-weighted sum in [0, 1]) and were fitted on the evaluation kit's sets and semble's
code-search benchmark together (``bench/quality/rank_weights.py``, which also writes the
ablation of each rule into docs/BENCHMARKS.md):

* ``name`` — for a query that is one identifier (``Router``, ``serde::Deserialize``,
  ``Session.close``; semble's symbol queries, and what a user types to find a definition): a
  span that defines it (the last component, or the whole qualified name at a ``.`` boundary)
  gets the weight, a case-insensitive match half of it; a type definition (class, struct,
  interface, trait, enum, ...) ``name_type`` more, since a bare type name asks for the type
  before a function of the same name; a file named after the identifier (``router.go`` for
  ``Router``) ``name_file``. A member of the named type (``Serialize.serialize`` for
  ``Serialize``) gets ``member``, more than another type's namesake in another case
  (``Content.serialize``): the type's own code answers before code that merely shares its word.
  A span that re-exports the name (Rust ``pub use``, ``export { A } from``: the index's
  ``exports``) gets half the weight: where a name defined in another package enters this one.
  (An identifier quoted inside a sentence got no weight: on the fitting sets it moved answers
  away from the sentence's subject; re-measured with bge-small-en-v1.5, half the weight cost
  the docstring set 0.03 MRR@10.)
* ``example`` — for a question about code, a span under an examples, demos or samples folder
  (``_examples/rest/main.go``) loses ``example``: it uses the project's API in the question's
  words, but the project's code is the answer. A user's how-to keeps it.
* ``preamble`` — for a question about code in words, a file's nameless first span (its
  imports, a namespace and a partial class opening: ``SqlMapper.ITypeMap.cs`` lines 1-5) loses
  ``preamble``: it names the module's vocabulary and answers nothing. (For every query alike,
  the kit's docstring set lost 0.011 MRR@10 with bge-small-en-v1.5.)
* ``path`` — the share of the query's content words that name the span's file or its folder
  (``middleware`` in ``middleware/logger.go``, ``formats`` in ``formatter.bash``), for a
  question in words: the file is often the answer (an architecture question is about a module).
  A question about how the code works ("how are type adapters selected") gets half of it
  (``HOW_PATH``): the file named after its topic defines the thing, while the code that does
  what it asks about is as often a hub that uses it (``Gson.java`` for ``TypeAdapterFactory``).
  A word that names more than ``COMMON_PATH`` of the pool's files (``schema`` among a schema
  library's ``schemas.ts`` files) is the project's vocabulary and tells no file from another:
  it counts in neither the share nor its denominator (``telling_words``). Code spans only: a
  page of prose gets its path's words from the page index already (``search.pages``), and
  counting them twice ranked a sibling page's section first (the DokuWiki set's English
  questions 0.890 -> 0.905 MRR@10 without it, the docs set 0.7138 -> 0.7157, semble level).
* ``file`` — file-level evidence: a file whose spans crowd the top of the pool is the subject
  of the question. A file's evidence is the sum of its spans' scores within ``FILE_BAND`` of the
  pool's best; a partial file or a test (``SqlMapper.Async.cs``, ``router.test.ts``,
  ``completions_test.go``) adds its evidence to the file it is about (``SqlMapper.cs``,
  ``router.ts``, ``completions.go``) when that is in the pool (``search.paths.subjects``; a
  test's: semble +0.0006, the kit level). The file's best span gets ``file`` times its
  evidence over the best file's, and a base file its partial files lent to (the hub of a
  family: ``SqlMapper.cs`` of ``SqlMapper.Async.cs``) ``family`` more: answers from one
  partial class's files are one class's, whose core the base file holds (semble's C# 0.873 ->
  0.945, a TypeScript question up, the kit's sets unchanged). Only when some file (with its
  partial files) holds ``FILE_CROWD`` of the fusion's first ten: two spans of one file among
  ten is chance in a corpus of many files (CoSQA's shards of unrelated snippets: 94% of its
  queries have no file with three, semble's 3%), and lifting such a file cost CoSQA 0.016
  MRR@10 with bge-small-en-v1.5.
* ``docs`` — for a question about code (it names an identifier, asks how the code works —
  "how does X ...", "where is X ..." — or names code: function, method, class, ...), and not
  about docs (readme, guide, install, example, ...), documentation and plain-text spans lose
  ``docs``, and ``docs_symbol`` more for a bare identifier: a README restates what the code
  does in the question's own words and outranks the code that answers it. A user's how-to
  ("how do I declare a body") and a heading-like query keep the fusion's balance of prose and
  code. A changelog (CHANGES, HISTORY, NEWS, ...) loses ``changelog`` whatever the question: it
  names every identifier once, which makes it a lexical match for anything.
* ``test`` — a test's code span whose subject file (``search.paths.subjects``:
  ``command_test.go`` -> ``command.go``) is in the pool loses ``test``, unless the query
  mentions tests: the test exercises the code in the question's words, and the code it tests
  answers first. (A test demotion for every test cost bge 0.015 on semble: bats-core's library
  is test tooling with no subject file.)
* ``spread`` — diversity: a candidate from a file that already has ``SPREAD_FREE`` answers
  above it loses ``spread`` per such answer (a greedy pass over the first answers), unless it
  would join one of them (``search.join`` returns adjacent spans as one range, which costs no
  slot). The top 10 held 5.3 distinct files on semble's benchmark; a question with two target
  files lost the second. A partial file (``SqlMapper.DapperRow.cs``) counts the answers of its
  whole family (its base file ``SqlMapper.cs`` and the base's other partial files), the base
  file only its own: ten slices of one partial class are one file's ten answers, and the base
  file they all belong to is the family's hub, not a sibling to push down.

A long query (an issue, a traceback: more lexical terms than the calibration's threshold) gets
the stage's weights scaled down (``length_scale``) and neither ``file`` nor ``spread``: it names
its place in its own words, and an issue's answer is often a second span of the file its first
answer is in (SWE-bench Lite, all 30 snapshots, bge-small-en-v1.5: MRR@10 0.373 with the stage
off, 0.360 with spread, 0.373 without).

Measured with both models and left out, because the two disagreed or a kit set paid: a
stronger ``file`` (MiniLM semble +0.008, the kit's CoSQA and docs -0.005 each), more ``file``
only for "how does X" questions (MiniLM +0.007, bge -0.004 to -0.014), a path word's credit
split among the pool's files it names (bge +0.008, MiniLM -0.001, docstring -0.015), a file
stem that begins the identifier (``format.h`` for ``formatter``: +0.0002), file evidence
weighted by a span's length (semble level, docs -0.005), no preamble rule for a module's index
file (``mod.rs``: 2 questions up, 3 down).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rag_mcp.index.lexical import STOP_WORDS, split_identifier, tokenize
from rag_mcp.index.spans import TEST_WORDS, is_test_file
from rag_mcp.search.paths import base_file, path_share, stem, subjects, telling_words

if TYPE_CHECKING:
    from rag_mcp.search.retrieve import Hit

#: an identifier, possibly qualified (``a.b``, ``a::b``, ``a->b``, ``A\\B``, ``A#b``)
IDENT = re.compile(r"[A-Za-z_$][\w$]*(?:(?:::|\.|->|\\|#)[A-Za-z_$][\w$]*)*")
#: written like code: an inner capital, an underscore, or a qualifier
CODE_LIKE = re.compile(r"[a-z0-9][A-Z]|[A-Z][a-z0-9]+[A-Z]|\w_\w|::|\w\.\w|->")
QUALIFIER = re.compile(r"::|\.|->|\\|#")
#: definition kinds that are types (a bare type name asks for the type)
TYPE_KINDS = frozenset({"class", "struct", "interface", "trait", "enum", "type", "union",
                        "record", "object", "protocol", "module", "namespace", "impl"})
CHANGELOG = re.compile(r"(?i)^(changelog|changes|history|news|release[-_ ]?notes|releases)$")
#: query words that ask for documentation rather than code
DOC_WORDS = frozenset({"doc", "docs", "documentation", "documented", "readme", "guide",
                       "tutorial", "example", "examples", "changelog", "install",
                       "installation", "usage", "faq", "license", "contributing"})
WORD = re.compile(r"[^\W\d_][^\W_]*")  # a letter of any script, then letters or digits
#: a folder of examples, demos or samples: code that uses the project, not the project
EXAMPLE_DIR = re.compile(r"(?i)(?:^|/)_?(?:examples?|demos?|samples?)/")
#: a question about how the code works, rather than how to use it ("how does X parse",
#: "how the router matches", "where is X implemented"); "how do I" / "how to" are a user's
_HOW = r"how\s+(?!do\s+i\b|to\b|can\s+i\b|should\s+i\b|would\s+i\b)"
CODE_QUESTION = re.compile(
    r"(?i)^\s*(?:" + _HOW + r"|where\s+(?:is|are|does)\b"
    r"|which\s+(?:function|method|class|module|file|code)\b)")
#: a question about how the code works, the first of those ("how does X ...")
HOW_QUESTION = re.compile(r"(?i)^\s*" + _HOW)
#: the share of ``path`` a question about how the code works gets
HOW_PATH = 0.5
#: words that name code rather than prose
CODE_WORDS = frozenset({"function", "functions", "method", "methods", "class", "classes",
                        "implementation", "implemented", "implements", "internally", "struct",
                        "interface", "trait", "handler", "called", "calls", "callback",
                        "constructor", "signature", "returns"})
#: question words that carry no content (beyond the lexical index's stop words)
FRAME_WORDS = frozenset({"does", "do", "are", "how", "can", "should", "use", "used", "using"})
#: a file's evidence counts its spans within this much of the pool's best score
FILE_BAND = 0.2
#: file evidence needs a file (with its partial files) holding this many of the fusion's first
#: ``CROWD_TOP`` candidates; two is chance in a corpus of many files
FILE_CROWD = 3
CROWD_TOP = 10
#: answers a file may have before the spread penalty starts
SPREAD_FREE = 1
#: the candidates the stage reorders (the fusion's order beyond)
DEPTH = 50
#: answers (ranges: spans that join one count once) the spread pass places one by one
#: (rag_query's largest k); the rest by score
SPREAD_DEPTH = 20


@dataclass(frozen=True, slots=True)
class Weights:
    """The stage's weights, on the fused score's scale (module docstring)."""

    name: float = 0.3
    name_type: float = 0.1
    name_file: float = 0.15
    member: float = 0.2
    example: float = 0.2
    preamble: float = 0.05
    path: float = 0.15
    file: float = 0.04
    family: float = 0.04
    docs: float = 0.15
    docs_symbol: float = 0.1
    changelog: float = 0.15
    test: float = 0.1
    spread: float = 0.2


DEFAULT = Weights()
#: every weight 0: the fusion's order as it is
OFF = Weights(**{f: 0.0 for f in Weights.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class Candidate:
    """What the stage reads of one fused candidate."""

    path: str
    start_line: int
    end_line: int
    kind: str  # code, doc or text
    symbol: str | None
    definition: str  # the definition kind ("class", "function", ...), "" if none
    score: float  # the fusion's raw score
    exports: frozenset[str] = frozenset()  # the names it re-exports


@dataclass(frozen=True, slots=True)
class QueryIntent:
    """What the query asks for, read once per query."""

    names: frozenset[str]  # identifiers it names (last components and qualified forms)
    bare: bool  # the whole query is one identifier
    words: frozenset[str]  # its content words, lower case (split identifiers)
    docs: bool  # it asks about documentation
    code: bool  # it asks about code: names an identifier, or how the code works
    how: bool = False  # it asks how the code works (``HOW_QUESTION``)
    tests: bool = False  # it mentions tests (``TEST_WORDS``)


def intent(query: str) -> QueryIntent:
    q = query.strip()
    bare = " " not in q and IDENT.fullmatch(q) is not None
    named = [q] if bare else [m for m in IDENT.findall(q) if len(m) > 2 and CODE_LIKE.search(m)]
    names: set[str] = set()
    for n in named:
        dotted = QUALIFIER.sub(".", n).strip(".")
        names.add(dotted)
        names.add(dotted.rsplit(".", 1)[-1])
    words: set[str] = set()
    for w in WORD.findall(q):
        for p in split_identifier(w) if not w.islower() else [w.casefold()]:
            if len(p) > 2 and p not in STOP_WORDS and p not in FRAME_WORDS:
                words.add(p)
    lowered = {w.lower() for w in WORD.findall(q)}
    docs = not DOC_WORDS.isdisjoint(lowered)
    code = not docs and (bool(names) or CODE_QUESTION.match(q) is not None
                         or not CODE_WORDS.isdisjoint(lowered))
    how = HOW_QUESTION.match(q) is not None
    tests = not TEST_WORDS.isdisjoint(lowered)
    return QueryIntent(frozenset(names), bare, frozenset(words), docs, code, how, tests)


def name_evidence(c: Candidate, q: QueryIntent, w: Weights) -> float:
    """What naming the span's identifier (or its file) earns."""
    if not q.names or c.kind != "code":
        return 0.0
    s = 0.0
    sym = QUALIFIER.sub(".", c.symbol or "")
    parts = sym.split(".")
    last = parts[-1]
    lowered = {n.lower() for n in q.names}
    if sym and (last in q.names or any(sym.endswith("." + n) or sym == n for n in q.names)):
        s += w.name + (w.name_type if c.definition in TYPE_KINDS else 0.0)
    elif sym and w.member and not q.names.isdisjoint(parts[:-1]):
        s += max(w.member, w.name / 2 if last.lower() in lowered else 0.0)
    elif (sym and last.lower() in lowered) or not q.names.isdisjoint(c.exports):
        s += w.name / 2
    named = re.sub(r"[-_]", "", stem(c.path).lower())
    if named in lowered or named.rstrip("s") in lowered:
        s += w.name_file
    return s


def base_evidence(c: Candidate, q: QueryIntent, w: Weights, shares: dict[str, float],
                  tested: AbstractSet[str] = frozenset()) -> float:
    """The candidate's own evidence: names, path words, docs intent, changelogs, tests
    (``shares``: path -> ``path_share`` over the pool's ``telling_words``; ``tested``: the
    pool's tests whose subject file is in the pool too)."""
    s = c.score
    if c.kind == "code" and c.path in tested:
        s -= w.test  # the code it tests is in the pool: that answers first
    if q.bare:
        s += name_evidence(c, q, w)
    if q.code and w.example and EXAMPLE_DIR.search(c.path):
        s -= w.example
    if q.code and not q.bare and c.kind == "code" and not c.symbol and c.start_line == 1:
        s -= w.preamble  # a file's preamble: imports, a namespace, a partial class opening
    if q.words and not q.bare and w.path and c.kind == "code":
        s += w.path * shares.get(c.path, 0.0) * (HOW_PATH if q.how else 1.0)
    if c.kind != "code":
        if CHANGELOG.match(stem(c.path)):
            s -= w.changelog
        if q.code:
            s -= w.docs + (w.docs_symbol if q.bare else 0.0)
    return s


def file_evidence(cands: Sequence[Candidate], scores: list[float], w: Weights) -> None:
    """Add each file's share of the pool's top to its best span (in place)."""
    if not w.file or not scores:
        return
    crowd = Counter(base_file(c.path) for c in cands[:CROWD_TOP])
    if max(crowd.values()) < FILE_CROWD:
        return  # no file crowds the top: which files the pool's spans share is chance
    floor = max(scores) - FILE_BAND
    mass: dict[str, float] = defaultdict(float)
    lead: dict[str, int] = {}
    for i, c in enumerate(cands):
        mass[c.path] += max(0.0, scores[i] - floor)
        if c.path not in lead or scores[i] > scores[lead[c.path]]:
            lead[c.path] = i
    # a partial file or a test lends its evidence to the files it is about (``_subjects``)
    lent: dict[str, float] = defaultdict(float)
    hubs: set[str] = set()  # base files lent to by their partial files: a family's hub
    for path, m in mass.items():
        for base in subjects(path, mass):
            lent[base] += m
            if m and base_file(path) == base:
                hubs.add(base)
    for base, m in lent.items():
        mass[base] += m
    best = max(mass.values()) or 1.0
    for path, i in lead.items():
        scores[i] += (w.file + (w.family if path in hubs else 0.0)) * mass[path] / best


def spread(cands: Sequence[Candidate], scores: list[float], w: Weights, gap: int = 3,
           max_lines: int = 150) -> list[int]:
    """The order by score, a file's answers beyond ``SPREAD_FREE`` penalised by ``w.spread``
    each (greedy); a candidate that would join an answer of its file is not penalised."""
    order = sorted(range(len(cands)), key=lambda i: -scores[i])
    if not w.spread:
        return order
    ranges: dict[str, list[list[int]]] = defaultdict(list)
    base = [base_file(c.path) for c in cands]
    family: dict[str, int] = defaultdict(int)  # answers of a base file and its partial files
    effective = {i: scores[i] for i in order}  # a file's penalty changes when it gets an answer
    out: list[int] = []
    answers = 0  # ranges placed: joined spans are one answer
    while effective and answers < SPREAD_DEPTH:
        i = max(effective, key=effective.__getitem__)  # ties: the fusion's order (dict order)
        del effective[i]
        c = cands[i]
        mine = ranges[c.path]
        r = _joins(mine, c, gap, max_lines)
        if r is None:
            mine.append([c.start_line, c.end_line])
            family[base[i]] += 1
            answers += 1
        else:
            r[0], r[1] = min(r[0], c.start_line), max(r[1], c.end_line)
        out.append(i)
        for j in effective:
            if cands[j].path == c.path and _joins(mine, cands[j], gap, max_lines) is not None:
                effective[j] = scores[j]
            elif cands[j].path == c.path or base[i] == base[j] != cands[j].path:
                # a partial file counts its family's answers; the base file its own
                n = family[base[j]] if base[j] != cands[j].path else len(mine)
                effective[j] = scores[j] - w.spread * max(0, n - SPREAD_FREE + 1)
    # past the answers any k reaches: the rest by score
    return out + sorted(effective, key=lambda x: -scores[x])


def _joins(ranges: list[list[int]], c: Candidate, gap: int, max_lines: int) -> list[int] | None:
    for r in ranges:
        if (c.start_line <= r[1] + gap + 1 and c.end_line >= r[0] - gap - 1
                and max(r[1], c.end_line) - min(r[0], c.start_line) < max_lines):
            return r
    return None


def length_scale(query: str, terms: float) -> float:
    """``min(1, terms / n) ** 2`` for a query of ``n`` distinct lexical terms (``terms``: the
    fusion's length threshold, ``search.fusion``). A long query (an issue, a traceback) has its
    fused scores squeezed together, so evidence on a short query's scale would decide alone.
    Measured on the kit's SWE-bench issues (18-208 terms; 17 of 30 indexed here), MRR@10 0.417
    with the stage off: 0.314 unscaled, 0.412 with ``terms / n``, 0.427 with its square."""
    n = len(set(tokenize(query)))
    return 1.0 if n <= terms else (terms / n) ** 2


def rank(query: str, cands: Sequence[Candidate], w: Weights = DEFAULT, *, gap: int = 3,
         max_lines: int = 150, terms: float = 8) -> list[int]:
    """The new order of ``cands`` (given in the fusion's order) as indexes into it: the first
    ``DEPTH`` reordered by the stage's evidence, the rest as they were. ``gap`` and
    ``max_lines`` are rag_query's join settings (``query.join_gap``, ``join_max_lines``),
    ``terms`` the calibration's length threshold (``Calibration.terms``)."""
    head = list(cands[:DEPTH])
    scale = length_scale(query, terms)
    if scale < 1.0:
        # an issue or a traceback names its place in its own words: its answers are neither
        # lifted by the files that crowd the pool nor spread over files
        w = Weights(**{f: 0.0 if f in ("file", "spread") else getattr(w, f) * scale
                       for f in Weights.__dataclass_fields__})
    if not head or w == OFF:
        return list(range(len(cands)))
    q = intent(query)
    paths = {c.path for c in head}
    shares: dict[str, float] = {}
    if q.words and not q.bare and w.path:
        told = telling_words(paths, q.words)
        shares = {p: path_share(p, told) for p in paths}
    tested = {p for p in paths if is_test_file(p) and subjects(p, paths)} \
        if w.test and not q.tests else set()
    scores = [base_evidence(c, q, w, shares, tested) for c in head]
    file_evidence(head, scores, w)
    return spread(head, scores, w, gap, max_lines) + list(range(len(head), len(cands)))


def candidate(hit: Hit) -> Candidate:
    """What the stage reads of a fused hit."""
    sp, meta = hit.span, dict(hit.span.meta)
    return Candidate(sp.path, sp.start_line, sp.end_line, sp.kind, sp.symbol, meta.get("def", ""),
                     hit.raw, frozenset(meta.get("exports", "").split()))


def ranked(query: str, hits: list[Hit], *, gap: int = 3, max_lines: int = 150,
           terms: float = 8) -> list[Hit]:
    """``hits`` (in the fusion's order) in the stage's order; each keeps its own scores."""
    order = rank(query, [candidate(h) for h in hits], gap=gap, max_lines=max_lines, terms=terms)
    return [hits[i] for i in order]
