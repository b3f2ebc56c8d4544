"""``rag-mcp config``: per-client snippets, and --write merging without clobbering."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from indexers.pipeline import run_index
from rag_mcp.config import Settings, load_settings
from rag_mcp.errors import ConfigError, InvalidArgument
from rag_mcp.serve import clients
from rag_mcp.serve.__main__ import main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HASH = "test-hash-64"
FILES = {
    "cursor": ".cursor/mcp.json", "claude-code": ".mcp.json", "vscode": ".vscode/mcp.json",
    "gemini": ".gemini/settings.json",
}
HOME_FILES = {
    "windsurf": ".codeium/windsurf/mcp_config.json", "codex": ".codex/config.toml",
}


@pytest.fixture
def repo(sample_repo: Path) -> Settings:
    return load_settings({"root": str(sample_repo), "embed_model": HASH})


def run(settings: Settings, client: str, home: Path, write: bool = False) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    assert clients.client_config(settings, client, write=write, home=home, out=out,
                                 err=err) == 0
    return out.getvalue(), err.getvalue()


def root_arg(args: list[str]) -> str:
    return args[args.index("--root") + 1]


def parse(client: str, text: str) -> dict:
    return tomllib.loads(text) if client == "codex" else json.loads(text)


@pytest.mark.parametrize("client", sorted(clients.CLIENTS))
def test_each_snippet_is_valid_and_absolute(repo: Settings, tmp_path: Path, client: str) -> None:
    home = tmp_path / "home"
    out, err = run(repo, client, home)
    spec = clients.CLIENTS[client]
    servers = parse(client, out)[spec.key]
    assert len(servers) == 1
    name, entry = next(iter(servers.items()))
    assert Path(entry["command"]).is_absolute() and Path(entry["command"]).exists()
    assert root_arg(entry["args"]) == repo.root and entry["args"][0] == "serve"
    target = spec.target(Path(repo.root), home)
    assert str(target) in err  # says which file it goes in
    if client in FILES:
        assert name == "rag" and target == Path(repo.root) / FILES[client]
    elif client in HOME_FILES:
        assert name == "rag-repo" and target == home / HOME_FILES[client]
    if client == "vscode":
        assert entry["type"] == "stdio"  # VS Code's format: top-level "servers", typed entries
    if client == "codex":
        assert entry["startup_timeout_sec"] >= 20  # Codex's 10 s default is too tight
    if client == "claude-code":
        assert "claude mcp add --scope project rag -- " in err


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_printed_command_starts_a_working_server(repo: Settings, tmp_path: Path
                                                           ) -> None:
    run_index(repo)
    out, _ = run(repo, "vscode", tmp_path)
    entry = json.loads(out)["servers"]["rag"]
    params = StdioServerParameters(command=entry["command"], args=entry["args"],
                                   env=dict(os.environ))
    async with Client(params, mode="legacy") as session:
        r = await session.call_tool("rag_health", {})
        assert r.structured_content is not None and r.structured_content["status"] == "ok"
        assert r.structured_content["root"] == repo.root


def test_write_merges_json_keeps_others_and_backs_up(repo: Settings, tmp_path: Path) -> None:
    target = Path(repo.root) / ".cursor" / "mcp.json"
    target.parent.mkdir()
    original = {"mcpServers": {"github": {"command": "gh-mcp", "args": ["--x"]}},
                "otherSetting": [1, 2]}
    target.write_text(json.dumps(original))
    _, err = run(repo, "cursor", tmp_path, write=True)
    merged = json.loads(target.read_text())
    assert merged["mcpServers"]["github"] == original["mcpServers"]["github"]
    assert merged["otherSetting"] == [1, 2]
    assert root_arg(merged["mcpServers"]["rag"]["args"]) == repo.root
    backups = list(target.parent.glob("mcp.json.bak-*"))
    assert len(backups) == 1 and json.loads(backups[0].read_text()) == original
    assert "backed up" in err and "wrote" in err
    # Again: nothing to do, no second backup.
    _, err = run(repo, "cursor", tmp_path, write=True)
    assert "nothing changed" in err
    assert len(list(target.parent.glob("mcp.json.bak-*"))) == 1


def test_write_creates_a_missing_file(repo: Settings, tmp_path: Path) -> None:
    home = tmp_path / "home"
    run(repo, "windsurf", home, write=True)
    doc = json.loads((home / HOME_FILES["windsurf"]).read_text())
    assert set(doc["mcpServers"]) == {"rag-repo"}
    assert not list((home / HOME_FILES["windsurf"]).parent.glob("*.bak-*"))


def test_write_merges_toml_replacing_only_our_table(repo: Settings, tmp_path: Path) -> None:
    target = tmp_path / HOME_FILES["codex"]
    target.parent.mkdir(parents=True)
    original = (
        '# my codex settings\nmodel = "gpt-5"\n\n'
        '[mcp_servers.github]\ncommand = "gh-mcp" # keep me\nargs = ["--x"]\n\n'
        '[mcp_servers.rag-repo]\ncommand = "/old/rag-mcp"\nargs = []\n\n'
        '[mcp_servers.rag-repo.env]\nOLD = "1"\n\n'
        '[profiles.fast]\nmodel = "o4-mini"\n')
    target.write_text(original)
    run(repo, "codex", tmp_path, write=True)
    text = target.read_text()
    doc = tomllib.loads(text)
    assert doc["model"] == "gpt-5" and doc["profiles"]["fast"]["model"] == "o4-mini"
    assert doc["mcp_servers"]["github"] == {"command": "gh-mcp", "args": ["--x"]}
    ours = doc["mcp_servers"]["rag-repo"]
    assert ours["command"] != "/old/rag-mcp" and "env" not in ours
    assert "# my codex settings" in text and "# keep me" in text
    assert [p.read_text() for p in target.parent.glob("config.toml.bak-*")] == [original]


def test_write_refuses_files_it_cannot_merge_safely(repo: Settings, tmp_path: Path) -> None:
    target = Path(repo.root) / ".vscode" / "mcp.json"
    target.parent.mkdir()
    jsonc = '{\n  // my servers\n  "servers": {}\n}\n'
    target.write_text(jsonc)
    with pytest.raises(ConfigError, match="not plain JSON"):
        run(repo, "vscode", tmp_path, write=True)
    assert target.read_text() == jsonc and not list(target.parent.glob("*.bak-*"))
    codex = tmp_path / HOME_FILES["codex"]
    codex.parent.mkdir(parents=True)
    codex.write_text('mcp_servers.rag-repo.command = "x"\n')  # dotted keys: not ours to edit
    with pytest.raises(ConfigError, match="safely"):
        run(repo, "codex", tmp_path, write=True)
    assert codex.read_text() == 'mcp_servers.rag-repo.command = "x"\n'


def test_chatgpt_instructions(repo: Settings, tmp_path: Path) -> None:
    out, _ = run(repo, "chatgpt", tmp_path)
    assert "--http" in out and repo.root in out and "/mcp/$RAG_HTTP_TOKEN" in out
    assert "Secure MCP Tunnel" in out and "No authentication" in out
    # every command that serves ChatGPT offers it the search and fetch tools it calls
    serving = [x for x in out.splitlines() if " serve --root " in x]
    assert len(serving) == 3 and all("--connector-tools" in x for x in serving), serving
    assert "--auth oauth" in out
    with pytest.raises(InvalidArgument, match="web settings"):
        run(repo, "chatgpt", tmp_path, write=True)


def test_cli_prints_snippet_to_stdout_and_rejects_unknown_clients(
        repo: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["config", "--client", "vscode", "--root", repo.root]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["servers"]["rag"]["type"] == "stdio"
    assert ".vscode/mcp.json" in captured.err
    assert main(["config", "--client", "emacs", "--root", repo.root]) == 2
    assert "choose one of cursor, windsurf" in capsys.readouterr().err
    assert main(["config", "--client", "codex", "--root", repo.root, "--write"]) == 0
    assert "rag-repo" in tomllib.loads((tmp_path / ".codex/config.toml").read_text())[
        "mcp_servers"]


@pytest.mark.parametrize("client", ["claude-code", "cursor", "vscode", "gemini"])
def test_written_config_does_not_make_the_index_stale(repo: Settings, tmp_path: Path,
                                                      client: str) -> None:
    """A config file (and its backup) written into the repository is not indexed, so
    rag_health does not call the index stale the moment it appears."""
    from indexers.status import staleness
    from rag_mcp.index import generation as gen
    from rag_mcp.index.catalog import Catalog

    run_index(repo)
    target = clients.CLIENTS[client].target(Path(repo.root), tmp_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({clients.CLIENTS[client].key: {}}))  # the user's own file...
    run(repo, client, tmp_path, write=True)  # ...merged into, after a backup
    written = [p for p in target.parent.iterdir() if p.name.startswith(target.name)]
    assert target in written and any(".bak-" in p.name for p in written), written
    pointer = gen.read_pointer(repo.index_path)
    assert pointer is not None
    catalog = Catalog(pointer.dir / gen.CATALOG, readonly=True)
    try:
        assert staleness(repo, catalog.files()).count == 0, written
    finally:
        catalog.close()


def test_every_config_written_into_a_repository_is_one_the_walker_skips(tmp_path: Path) -> None:
    """The walker's ``client_config`` list (indexers cannot import serve) names every file
    ``config --write`` may put inside a repository, so a new client cannot be forgotten there."""
    from indexers.walk import CLIENT_CONFIGS

    root, home = tmp_path / "repo", tmp_path / "home"
    targets = [c.target(root, home) for c in clients.CLIENTS.values()]
    inside = {t.relative_to(root).as_posix() for t in targets if t.is_relative_to(root)}
    assert inside and inside <= CLIENT_CONFIGS, inside - CLIENT_CONFIGS
