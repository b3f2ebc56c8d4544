"""``rag-mcp config --client NAME [--write]``: the exact configuration for each assistant.

The snippet goes to stdout (so ``> file`` works), where it goes and what to do next to stderr.
``--write`` merges the entry into the client's file: other servers and keys are kept, the old
file is copied to ``<file>.bak-<time>`` first, the new one is written atomically and parsed back.
Templates live in ``configs/clients/``; the formats were checked against each client's docs
(links in docs/CLIENTS.md).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import configs
from rag_mcp.config import Settings, defaults
from rag_mcp.errors import ConfigError, InvalidArgument

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@dataclass(frozen=True, slots=True)
class Client:
    name: str
    label: str
    template: str  # file under configs/clients/
    #: the file --write merges into, given the repository root and the home folder
    target: Callable[[Path, Path], Path]
    #: the top-level key holding the servers (mcpServers, servers, mcp_servers)
    key: str
    notes: str = ""


def _claude_desktop(_root: Path, home: Path) -> Path:
    if sys.platform == "darwin":
        return home / "Library/Application Support/Claude/claude_desktop_config.json"
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA", home / "AppData/Roaming")) / "Claude" / \
            "claude_desktop_config.json"
    return home / ".config/Claude/claude_desktop_config.json"


CLIENTS: dict[str, Client] = {c.name: c for c in (
    Client("cursor", "Cursor", "cursor.json", lambda r, h: r / ".cursor/mcp.json", "mcpServers",
           "For every project instead: ~/.cursor/mcp.json. Cursor lists the server under "
           "Settings > MCP; turn it on there if it is off."),
    Client("windsurf", "Windsurf", "windsurf.json",
           lambda r, h: h / ".codeium/windsurf/mcp_config.json", "mcpServers",
           "Then press Refresh in Cascade's MCP panel. For a running `rag-mcp serve --http`, "
           'Windsurf wants {"serverUrl": "http://127.0.0.1:<port>/mcp"} instead of command/args.'),
    Client("claude-code", "Claude Code", "claude-code.json", lambda r, h: r / ".mcp.json",
           "mcpServers", "Claude Code asks once to approve servers from a project's .mcp.json; "
           "/mcp shows their status."),
    Client("claude-desktop", "Claude Desktop", "claude-desktop.json", _claude_desktop,
           "mcpServers", "Restart Claude Desktop after changing the file."),
    Client("vscode", "VS Code", "vscode.json", lambda r, h: r / ".vscode/mcp.json", "servers",
           "Then run 'MCP: List Servers' and start it, or open Copilot Chat in agent mode."),
    Client("gemini", "Gemini CLI", "gemini.json", lambda r, h: r / ".gemini/settings.json",
           "mcpServers", "For every project instead: ~/.gemini/settings.json. In Gemini CLI, "
           "/mcp lists the server and its tools; `gemini mcp list` checks it from a shell."),
    Client("codex", "Codex", "codex.toml", lambda r, h: h / ".codex/config.toml", "mcp_servers",
           "Codex CLI and the IDE extension share this file; /mcp lists the servers."),
)}
CHATGPT = "chatgpt"
NAMES = (*CLIENTS, CHATGPT)


def server_command() -> list[str]:
    """This installation's ``rag-mcp``, absolute: the console script next to the interpreter,
    else the interpreter with ``-m rag_mcp`` (a checkout used without installing)."""
    exe = Path(os.path.abspath(sys.executable))
    script = exe.with_name("rag-mcp.exe" if sys.platform == "win32" else "rag-mcp")
    return [str(script)] if script.is_file() else [str(exe), "-m", "rag_mcp"]


def server_args(settings: Settings) -> list[str]:
    args = ["serve"]
    for root in settings.roots:  # one --root per served repository
        args += ["--root", root]
    if settings.index_dir != defaults()["index_dir"]:
        args += ["--index-dir", settings.index_dir]
    if settings.log_dir:
        args += ["--log-dir", settings.log_dir]
    return args


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-_")[:40] or "repo"


def server_name(client: Client, root: Path, home: Path) -> str:
    """``rag`` in a file inside the repository; ``rag-<repo>`` in a per-user file, so two
    repositories configured there do not overwrite each other."""
    target = client.target(root, home)
    inside = target.resolve().is_relative_to(root.resolve())
    return "rag" if inside else f"rag-{_slug(root.name)}"


def _fill(node: Any, values: dict[str, Any]) -> Any:
    """Substitute ``{placeholder}`` strings (keys and values) in a parsed template."""
    if isinstance(node, dict):
        return {_fill(k, values): _fill(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [_fill(v, values) for v in node]
    if isinstance(node, str) and node.startswith("{") and node.endswith("}"):
        return values.get(node[1:-1], node)
    return node


def entry_for(client: Client, settings: Settings, home: Path) -> tuple[str, dict[str, Any]]:
    """The server's name and its configuration object for this client."""
    root = Path(settings.root)
    cmd = server_command()
    values = {"name": server_name(client, root, home), "command": cmd[0],
              "args": cmd[1:] + server_args(settings)}
    text = configs.read_text(f"clients/{client.template}")
    doc = tomllib.loads(text) if client.template.endswith(".toml") else json.loads(text)
    filled = _fill(doc, values)[client.key]
    name, entry = next(iter(filled.items()))
    return name, entry


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON string escapes are valid TOML
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def toml_block(key: str, name: str, entry: dict[str, Any]) -> str:
    lines = [f"[{key}.{_toml_key(name)}]"]
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"


def snippet(client: Client, name: str, entry: dict[str, Any]) -> str:
    if client.template.endswith(".toml"):
        return toml_block(client.key, name, entry)
    return json.dumps({client.key: {name: entry}}, indent=2, ensure_ascii=False) + "\n"


def _merge_json(text: str, path: Path, key: str, name: str, entry: dict[str, Any]) -> str | None:
    """The merged file text, or None when the entry is already there."""
    try:
        doc = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not plain JSON (line {exc.lineno}: {exc.msg}; comments "
                          "or trailing commas?); add the snippet by hand") from None
    if not isinstance(doc, dict) or not isinstance(doc.setdefault(key, {}), dict):
        raise ConfigError(f"{path}: expected an object with an object under {key!r}; add the "
                          "snippet by hand")
    if doc[key].get(name) == entry:
        return None
    doc[key][name] = entry
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def _merge_toml(text: str, path: Path, key: str, name: str, entry: dict[str, Any]) -> str | None:
    """Replace (or append) only our table, textually, so comments and other tables stay."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc}); fix it or add the snippet by "
                          "hand") from None
    if doc.get(key, {}).get(name) == entry:
        return None
    header = re.compile(r"^\s*\[\s*" + re.escape(key) + r"\s*\.\s*(\"?)" + re.escape(name)
                        + r"\1\s*(\]|\.)")
    kept: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("["):
            skipping = bool(header.match(line))
        if not skipping:
            kept.append(line)
    body = "".join(kept).rstrip("\n")
    return (body + "\n\n" if body else "") + toml_block(key, name, entry)


def write_entry(client: Client, path: Path, name: str, entry: dict[str, Any],
                out: TextIO) -> None:
    """Merge the entry into ``path``: backup, atomic replace, parse back."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    toml = client.template.endswith(".toml")
    merged = (_merge_toml if toml else _merge_json)(old, path, client.key, name, entry)
    if merged is None:
        out.write(f"{path} already has this entry ({name}); nothing changed\n")
        return
    try:
        parsed = tomllib.loads(merged) if toml else json.loads(merged)
        ok = parsed[client.key][name] == entry
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, KeyError, TypeError):
        ok = False
    if not ok:  # e.g. the entry was written with dotted keys we do not rewrite
        raise ConfigError(f"could not merge into {path} safely; nothing was changed; add the "
                          "snippet by hand")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        backup = path.with_name(f"{path.name}.bak-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.copy2(path, backup)
        out.write(f"backed up {path} to {backup.name}\n")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(merged)
        if path.exists():
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    out.write(f"wrote the {name!r} server into {path}\n")


def _shell(cmd: list[str]) -> str:
    return subprocess.list2cmdline(cmd) if sys.platform == "win32" else shlex.join(cmd)


def chatgpt_text(settings: Settings) -> str:
    text = configs.read_text("clients/chatgpt.md")
    for k, v in {"command": _shell(server_command()), "root": _shell([settings.root]),
                 "port": str(settings.http_port)}.items():
        text = text.replace("{" + k + "}", v)
    return text


def client_config(settings: Settings, client: str, *, write: bool = False,
                  home: Path | None = None, out: TextIO | None = None,
                  err: TextIO | None = None) -> int:
    """Print (or ``write``) the configuration for ``client``; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    home = home or Path.home()
    key = client.strip().lower()
    if key == CHATGPT:
        if write:
            raise InvalidArgument("ChatGPT is configured in its web settings, not a file: run "
                                  "`rag-mcp config --client chatgpt` and follow the steps")
        out.write(chatgpt_text(settings))
        return 0
    spec = CLIENTS.get(key)
    if spec is None:
        raise InvalidArgument(f"unknown client {client[:40]!r}; choose one of "
                              f"{', '.join(NAMES)}")
    name, entry = entry_for(spec, settings, home)
    path = spec.target(Path(settings.root), home)
    if write:
        write_entry(spec, path, name, entry, err)
    else:
        out.write(snippet(spec, name, entry))
        err.write(f"# {spec.label}: merge the above into {path}\n"
                  f"# or run: rag-mcp config --client {key} --root {_shell([settings.root])} "
                  "--write   (keeps other servers, backs the file up first)\n")
    if key == "claude-code":
        err.write("# or let Claude Code write it: claude mcp add --scope project "
                  f"{name} -- {_shell([entry['command'], *entry['args']])}\n")
    if spec.notes:
        err.write(f"# {spec.notes}\n")
    agents = Path(configs.__file__).resolve().parent / "AGENTS.md"
    err.write(f"# Also paste {agents} into your AGENTS.md or CLAUDE.md so the assistant "
              "reaches for rag_query before grep.\n")
    return 0
