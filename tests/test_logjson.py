from __future__ import annotations

import hashlib
from pathlib import Path

import orjson

from rag_mcp.logjson import LOG_NAME, ToolLog


def test_lines_rotate_and_queries_can_be_hashed(tmp_path: Path) -> None:
    log = ToolLog(tmp_path, max_bytes=2000, backups=2, queries="hash")
    for i in range(60):
        assert log.write({"tool": "rag_query", **log.query_field(f"query {i}"), "k": 5})
    assert (tmp_path / f"{LOG_NAME}.1").exists() and (tmp_path / f"{LOG_NAME}.2").exists()
    assert not (tmp_path / f"{LOG_NAME}.3").exists()
    last = orjson.loads((tmp_path / LOG_NAME).read_bytes().splitlines()[-1])
    assert last["query_sha256"] == hashlib.sha256(b"query 59").hexdigest()
    assert "query" not in last and last["ts"].endswith("Z")


def test_plain_queries_are_truncated_and_failures_never_raise(tmp_path: Path) -> None:
    log = ToolLog(tmp_path, max_bytes=10**6, backups=1)
    assert log.query_field("x" * 500)["query"] == "x" * 200
    blocked = tmp_path / "file"
    blocked.write_text("not a dir")
    bad = ToolLog(blocked / "logs", max_bytes=10**6, backups=1)
    assert bad.write({"tool": "rag_health"}) is False and bad.failures == 1


def test_the_folder_is_made_on_first_use_and_again_if_removed(tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "deep" / "logs"
    log = ToolLog(folder, max_bytes=10**6, backups=1)
    assert log.write({"tool": "rag_health"}) and (folder / LOG_NAME).exists()
    shutil.rmtree(tmp_path / "deep")  # someone cleans up while the server runs
    assert log.write({"tool": "rag_query"})
    assert [orjson.loads(x)["tool"] for x in (folder / LOG_NAME).read_bytes().splitlines()] == \
        ["rag_query"]
