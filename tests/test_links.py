"""Citable links for ChatGPT's search/fetch: forge permalinks from the git remote and HEAD, a
template as configured, and no link rather than a file:// one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tools import _links


@pytest.mark.parametrize("remote,want", [
    ("git@github.com:org/repo.git", "https://github.com/org/repo/blob/C/P#L1-L2"),
    ("https://github.com/org/repo", "https://github.com/org/repo/blob/C/P#L1-L2"),
    ("https://user:s3cret@github.com/org/repo.git", "https://github.com/org/repo/blob/C/P#L1-L2"),
    ("ssh://git@gitlab.com/group/sub/proj.git",
     "https://gitlab.com/group/sub/proj/-/blob/C/P#L1-2"),
    ("git@bitbucket.org:team/repo.git", "https://bitbucket.org/team/repo/src/C/P#lines-1:2"),
    ("https://codeberg.org/u/r.git", "https://codeberg.org/u/r/src/commit/C/P#L1-L2"),
    ("git@git.internal.example:org/repo.git", None),  # an unknown forge: no guess
    ("/srv/git/repo.git", None), ("https://github.com/justone", None),
])
def test_forge_templates(remote: str, want: str | None) -> None:
    t = _links.forge_template(remote)
    got = (t.replace("{commit}", "C").replace("{path}", "P").replace("{start}", "1")
           .replace("{end}", "2")) if t else None
    assert got == want
    assert "s3cret" not in (t or "")


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_span_urls_from_the_checkout(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a b.py").write_text("x = 1\n")
    assert _links.span_url("auto", str(root), "src/a b.py", 1, 1) == ""  # not a checkout
    git(root, "init", "-q")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
        "-m", "one")
    _links._remote_template.cache_clear()
    _links._commits.clear()
    assert _links.span_url("auto", str(root), "src/a b.py", 1, 1) == ""  # no remote
    git(root, "remote", "add", "origin", "git@github.com:org/repo.git")
    _links._remote_template.cache_clear()
    head = git(root, "rev-parse", "HEAD")
    assert _links.span_url("auto", str(root), "src/a b.py", 3, 7) == (
        f"https://github.com/org/repo/blob/{head}/src/a%20b.py#L3-L7")
    assert _links.span_url("", str(root), "src/a b.py", 3, 7) == ""
    assert _links.span_url("https://docs.example/{path}?l={start}", str(root), "a.py", 3, 7) \
        == "https://docs.example/a.py?l=3"


def test_search_and_fetch_take_the_configured_template(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from rag_mcp.config import load_settings
    from tools.search import span_url

    monkeypatch.setenv("RAG_URL_TEMPLATE", "https://git.example/r/{path}#L{start}-L{end}")
    s = load_settings({"root": str(tmp_path)})
    assert span_url(s, "a.py", 2, 4) == "https://git.example/r/a.py#L2-L4"
    assert load_settings({"root": str(tmp_path), "url_template": ""}).url_template == ""
