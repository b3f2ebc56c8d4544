"""PDF and Word documents: PDF text by page (pypdf), spans that name their page, .docx by its
headings (python-docx), the originals untouched, and documents that cannot be read named in
the rag-index summary with the reason."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from indexers.chunking import chunk_pages
from indexers.cli import render_summary
from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.index import documents
from rag_mcp.index.spans import split_lines
from rag_mcp.search.records import QueryParams
from rag_mcp.search.spanget import find_span
from tests.mcp_helpers import hash_deps, in_process, text

HASH = "test-hash-64"

MANUAL = [
    ["Ferret operations manual", "Chapter one covers installation on Debian and Fedora."],
    ["Backups", "The nightly backup window opens at 02:40 UTC and",
     "the retention period for snapshots is ninety-three days."],
    ["Monitoring", "Alerts page the on-call engineer after three failed health checks."],
]


def make_pdf(pages: list[list[str]], *, password: str | None = None) -> bytes:
    """A PDF with one text line per entry on each page, written by matplotlib (TrueType text
    that a PDF reader can extract), encrypted by pypdf when a password is given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    buf = io.BytesIO()
    with matplotlib.rc_context({"pdf.fonttype": 42}), PdfPages(buf) as pdf:
        for lines in pages:
            fig = plt.figure(figsize=(8.5, 11))
            for i, line in enumerate(lines):
                fig.text(0.1, 0.9 - i * 0.03, line, fontsize=11)
            pdf.savefig(fig)
            plt.close(fig)
    data = buf.getvalue()
    if password is None:
        return data
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=password, owner_password=password + "-owner",
                   algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.fixture(scope="module")
def manual_pdf() -> bytes:
    return make_pdf(MANUAL)


def settings_for(root: Path) -> Settings:
    return load_settings({"root": str(root), "embed_model": HASH})


def test_text_is_extracted_page_by_page(manual_pdf: bytes) -> None:
    ex = documents.extract("manual.pdf", manual_pdf)
    lines = split_lines(ex.text)
    assert len(ex.page_starts) == 3
    for page, want in enumerate(MANUAL, 1):
        first = ex.page_starts[page - 1]
        assert lines[first - 1] == want[0] and ex.page_of(first) == page
    chunks = chunk_pages(lines, ex.page_starts, budget_chars=60)
    assert len(chunks) > 3  # the budget cut pages into pieces
    for c in chunks:  # no span runs over a page break, and each names its page
        page = int(dict(c.meta)["page"])
        assert ex.page_of(c.start_line) == ex.page_of(c.end_line) == page
        assert c.kind == "doc"


def test_a_fact_only_in_a_pdf_is_found_and_cited_with_its_page(
        tmp_path: Path, manual_pdf: bytes) -> None:
    root = tmp_path / "kb"
    (root / "manuals").mkdir(parents=True)
    pdf = root / "manuals" / "ferret.pdf"
    pdf.write_bytes(manual_pdf)
    (root / "README.md").write_text("# Knowledge base\n\nManuals of the services we run.\n")
    before = hashlib.sha256(pdf.read_bytes()).hexdigest()
    stats = run_index(settings_for(root))
    assert stats.by_language.get("pdf", 0) >= 3 and not stats.not_read
    deps = hash_deps(settings_for(root))
    try:
        ans = deps.queries.query(QueryParams(
            query="retention period for snapshots nightly backup window", k=3,
            include_text=True))
        hit = ans.hits[0]
        assert hit.path == "manuals/ferret.pdf" and hit.page == 2
        assert hit.text is not None and "02:40 UTC" in hit.text
        got = find_span(list(deps.repos.values()), hit.id)
        assert got.page == 2 and "ninety-three days" in got.text and not got.stale
    finally:
        deps.close()
    assert hashlib.sha256(pdf.read_bytes()).hexdigest() == before  # only ever read


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_page_is_shown_in_rag_query_and_rag_get_span(
        tmp_path: Path, manual_pdf: bytes) -> None:
    root = tmp_path / "kb"
    root.mkdir()
    (root / "ferret.pdf").write_bytes(manual_pdf)
    s = settings_for(root)
    run_index(s)
    async with in_process(s) as (session, _):
        r = await session.call_tool("rag_query", {"query": "on-call engineer alerts"})
        assert r.structured_content is not None
        hit = r.structured_content["hits"][0]
        assert hit["page"] == 3 and hit["language"] == "pdf"
        assert "PDF page 3" in text(r)
        got = await session.call_tool("rag_get_span", {"span_id": hit["id"]})
        assert "three failed health checks" in text(got) and "PDF page 3" in text(got)


def test_documents_that_cannot_be_read_are_named_with_the_reason(
        tmp_path: Path, manual_pdf: bytes) -> None:
    root = tmp_path / "kb"
    root.mkdir()
    (root / "ok.pdf").write_bytes(manual_pdf)
    (root / "locked.pdf").write_bytes(make_pdf(MANUAL, password="s3cret"))
    (root / "broken.pdf").write_bytes(b"%PDF-1.7\n" + b"\x00garbage" * 50)
    (root / "scan.pdf").write_bytes(make_pdf([[]]))  # a page without any text
    (root / "slides.odp").write_bytes(b"PK\x03\x04" + b"\x00" * 64)
    (root / "locked.docx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504)
    # an owner password alone (no printing, no copying) still opens for reading
    (root / "restricted.pdf").write_bytes(make_pdf(MANUAL[:1], password=""))
    stats = run_index(settings_for(root))
    assert stats.files_changed == 2  # ok.pdf and restricted.pdf
    assert stats.not_read == {"broken.pdf": "damaged_document", "locked.pdf": "encrypted",
                              "scan.pdf": "no_text", "slides.odp": "unsupported_document",
                              "locked.docx": "encrypted"}
    summary = render_summary(stats)
    for line in ("locked.pdf: encrypted", "broken.pdf: damaged", "scan.pdf: no text layer",
                 "slides.odp: format not read", "locked.docx: encrypted"):
        assert line in summary, summary
    # a second run reads nothing again and still names them
    again = run_index(settings_for(root))
    assert not again.published and again.not_read == stats.not_read


def test_a_word_document_is_read_by_its_headings(tmp_path: Path) -> None:
    import docx

    d = docx.Document()
    d.add_heading("Ferret handbook", 0)
    d.add_paragraph("Internal notes for the operations team.")
    d.add_heading("Backups", 1)
    d.add_paragraph("Snapshots of the ledger database are kept for ninety-three days.")
    table = d.add_table(rows=2, cols=2)
    for (r, col), value in {(0, 0): "host", (0, 1): "window", (1, 0): "ledger-db",
                            (1, 1): "02:40 UTC"}.items():
        table.cell(r, col).text = value
    d.add_heading("Monitoring", 1)
    d.add_paragraph("Alerts page the on-call engineer after three failed checks.")
    root = tmp_path / "kb"
    root.mkdir()
    buf = io.BytesIO()
    d.save(buf)
    (root / "handbook.docx").write_bytes(buf.getvalue())
    stats = run_index(settings_for(root))
    assert stats.by_language == {"docx": stats.spans_total} and not stats.not_read
    deps = hash_deps(settings_for(root))
    try:
        ans = deps.queries.query(QueryParams(query="how long are ledger snapshots kept", k=3))
        # a joined hit names every section it spans, "; " apart
        hit = next(h for h in ans.hits
                   if "Ferret handbook > Backups" in (h.heading or "").split("; "))
        assert hit.kind == "doc" and hit.page is None and hit.anchor is None
        got = find_span(list(deps.repos.values()), hit.id)
        assert "ninety-three days" in got.text and "| ledger-db | 02:40 UTC |" in got.text
    finally:
        deps.close()
