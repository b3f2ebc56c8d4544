"""The lexical leg of hybrid retrieval: a BM25 index (tantivy) over identifier-split tokens.

Why tantivy: measured here on 50k spans (docs/DESIGN.md, "Lexical engine"), it indexed in 1.4 s
and answered a BM25 query in ~0.7 ms, against 7.5 s / 0.9 ms for bm25s (which must rebuild the
whole index on every change) and 4.2 s / 57 ms for SQLite FTS5. It also updates incrementally
(delete by term, add, commit), which keeps a one-file re-index cheap.

Tokens: lower-case word runs; identifiers are kept whole *and* split at snake_case and camelCase
boundaries, so ``parseHTTPResponse`` yields ``parsehttpresponse parse http response``. An exact
identifier in a query then matches its definition through the whole-word token, while a natural
language query still matches the parts. Words of any script count (``Größe``, ``élément``,
``функция``), Unicode-normalized (NFKC: a decomposed ``é`` is the composed one) and case folded
(``Straße`` and ``STRASSE`` are one token). Accents are kept: folding them away (``où`` into
``ou``, French "changé" into English "change") lost French questions on the DokuWiki set.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import shutil
import tempfile
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

WORD = re.compile(r"\w+")  # letters and digits of any script, and "_"
# Boundaries inside an identifier: "HTTPResponse" -> HTTP, Response; "utf8Decode" -> utf8, Decode.
CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+[0-9]*|[A-Z]+[0-9]*|[0-9]+")
MAX_TOKEN_LEN = 48
BM25_K1 = 1.2  # tantivy's constant (with b = 0.75)
#: how text becomes tokens (bumped when that changes: an index of other tokens is rebuilt)
TOKENS_VERSION = 2

#: span kinds whose files are also indexed whole, as pages (the generation's ``pages/`` index):
#: a page of documentation is about its subject as a whole, and its sections share its words
PAGE_KINDS = frozenset({"doc", "text"})

STOP_WORDS = frozenset(
    "a an and are as at be but by for from how i if in into is it its of on or so such that the "
    "their then there these this to was what when where which while who why will with".split()
)


def normal(text: str) -> str:
    """``text`` in Unicode's NFKC form (a decomposed ``é`` composed, ``ﬁ`` as ``fi``)."""
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


def split_identifier(word: str) -> list[str]:
    """Parts of one identifier, case folded: ``parse_span_id`` -> parse, span, id.

    camelCase is split in ASCII pieces only; a piece with other letters (``Größe``) stays
    whole (``grösse``).
    """
    parts: list[str] = []
    for piece in word.split("_"):
        if piece.isascii():
            parts.extend(p.lower() for p in CAMEL.findall(piece))
        elif piece:
            parts.append(piece.casefold())
    return parts


@functools.lru_cache(maxsize=262_144)
def _word_tokens(word: str) -> tuple[str, ...]:
    """Tokens of one word (cached: identifiers repeat all over a repository)."""
    low = word.casefold().strip("_")
    if not low or len(low) > MAX_TOKEN_LEN:
        return ()
    parts = split_identifier(word)
    if len(parts) > 1:
        return (low, *(p for p in parts if p not in STOP_WORDS))
    return () if low in STOP_WORDS else (low,)


def tokenize(text: str) -> list[str]:
    """Index and query tokens of ``text`` (whole identifiers plus their parts, no stop words)."""
    out: list[str] = []
    extend = out.extend
    for word in WORD.findall(normal(text)):
        extend(_word_tokens(word))
    return out


def name_tokens(path: str, label: str | None) -> list[str]:
    """Tokens of the span's path and symbol/heading, indexed in a boosted field."""
    return tokenize(path.replace("/", " ").replace(".", " ") + " " + (label or ""))


class LexicalIndex:
    """A tantivy index at ``path``: documents keyed by the span's integer ``sid``."""

    #: weight of the name field (path + symbol/heading) in the BM25 sum, chosen with the fusion
    #: weights by bench/quality/calibrate.py. On the kit's natural-language sets 0 and 0.25 tie on
    #: mean MRR@10 (+0.02 on docstring queries, -0.03 on docs headings, which the kit blanks); it
    #: stays on because a bare identifier query must find the definition, not a line using it.
    NAME_BOOST = 0.25
    #: the folder of a private copy this reader owns (``private_copy``)
    private: Path | None

    @classmethod
    def private_copy(cls, path: Path, checksums: Mapping[str, str] | None = None,
                     prefix: str = "") -> LexicalIndex:
        """A reader on a private copy of the published index at ``path``.

        tantivy memory-maps its segment files: one cut short under a running server killed it
        with SIGBUS, and on a read-only disk tantivy could not take its lock. The copy is ours
        (neither can happen to it) and is checked against the manifest's ``checksums`` (keys
        ``<prefix><name>``) after copying, so a file changed while it was copied is refused.
        """
        tmp = Path(tempfile.mkdtemp(prefix="rag-lexical-"))
        try:
            for src in path.iterdir():
                if src.is_file() and not src.name.endswith(".lock"):
                    shutil.copyfile(src, tmp / src.name)
                    want = (checksums or {}).get(prefix + src.name)
                    if want is None or want.startswith("size:"):
                        continue
                    with (tmp / src.name).open("rb") as fh:
                        if hashlib.file_digest(fh, "sha256").hexdigest() != want:
                            raise ValueError(f"{src.name} changed while it was read")
            index = cls(tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        index.private = tmp
        return index

    def close(self) -> None:
        """Drop a private copy (``private_copy``); the index is not usable afterwards."""
        if self.private is not None:
            shutil.rmtree(self.private, ignore_errors=True)
            self.private = None

    def __init__(self, path: Path, *, create: bool = False) -> None:
        import tantivy  # local: keeps `import rag_mcp` light

        self.private = None
        self._t = tantivy
        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("sid", stored=True, indexed=True, fast=True)
        builder.add_text_field("body", tokenizer_name="whitespace", index_option="freq")
        builder.add_text_field("name", tokenizer_name="whitespace", index_option="freq")
        self._schema = builder.build()
        path.mkdir(parents=True, exist_ok=True)
        if not create and not (path / "meta.json").exists():
            raise FileNotFoundError(f"no lexical index at {path}")
        self._index = tantivy.Index(self._schema, path=str(path), reuse=True)
        self._writer: Any = None
        self._searcher: Any = None

    # -- writing -----------------------------------------------------------------------------
    def _w(self) -> Any:
        if self._writer is None:
            self._writer = self._index.writer(heap_size=64_000_000, num_threads=1)
        return self._writer

    def add(self, sid: int, body_tokens: Sequence[str], name: Sequence[str]) -> None:
        doc = self._t.Document(sid=sid, body=" ".join(body_tokens), name=" ".join(name))
        self._w().add_document(doc)

    def delete(self, sids: Iterable[int]) -> None:
        w = self._w()
        for sid in sids:
            w.delete_documents_by_term("sid", sid)

    def commit(self) -> None:
        if self._writer is not None:
            self._writer.commit()
            self._writer.wait_merging_threads()
            self._writer = None
        self._searcher = None

    # -- reading -----------------------------------------------------------------------------
    def search(self, tokens: Sequence[str], limit: int, *, name_boost: float | None = None,
               field: str | None = None) -> list[tuple[int, float]]:
        """``(sid, bm25)`` pairs, best first, for a bag of query tokens (OR semantics).

        The score sums BM25 over the body field and, weighted by ``name_boost`` (default
        ``NAME_BOOST``), the name field; ``field`` restricts the search to one of them.
        """
        terms = list(dict.fromkeys(t for t in tokens if t))
        if not terms or limit <= 0:
            return []
        if self._searcher is None:
            self._index.reload()
            self._searcher = self._index.searcher()
        t = self._t
        boost = self.NAME_BOOST if name_boost is None else name_boost
        should = t.Occur.Should
        clauses = []
        if field in (None, "body"):
            clauses += [(should, t.Query.term_query(self._schema, "body", term))
                        for term in terms]
        if field == "name" or (field is None and boost > 0):
            w = 1.0 if field == "name" else boost
            clauses += [
                (should, t.Query.boost_query(t.Query.term_query(self._schema, "name", term), w))
                for term in terms
            ]
        result = self._searcher.search(t.Query.boolean_query(clauses), limit)
        out = []
        doc = self._searcher.doc
        for score, address in result.hits:
            out.append((int(doc(address)["sid"][0]), float(score)))
        return out

    def upper_bound(self, tokens: Sequence[str], *, name_boost: float | None = None) -> float:
        """The highest BM25 any document could score for these tokens, as ``search`` sums it.

        BM25 gives a term at most ``idf * (k1 + 1)`` (many occurrences in a short document), so
        dividing a score by this bound puts it on an absolute scale in [0, 1]: how much of the
        query's information a span matches, not how it compares with this query's best hit.
        """
        terms = list(dict.fromkeys(t for t in tokens if t))
        if not terms:
            return 0.0
        if self._searcher is None:
            self._index.reload()
            self._searcher = self._index.searcher()
        se = self._searcher
        n = se.num_docs
        boost = self.NAME_BOOST if name_boost is None else name_boost
        total = 0.0
        for field, weight in (("body", 1.0), ("name", boost)):
            if weight <= 0:
                continue
            for term in terms:
                df = se.doc_freq(field, term)
                if df:
                    total += weight * math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        return total * (BM25_K1 + 1.0)

    def num_docs(self) -> int:
        self._index.reload()
        return int(self._index.searcher().num_docs)
