"""The generated hostile inputs shared by the tests (pass/fail) and bench/safety/hostile.py
(figures).

Each study builds its fixture and its case list here, from code, so the tests and the bench try
exactly the same things and the counts printed into docs/SECURITY.md are the counts tested:

* ``path_cases``: crafted span IDs aimed outside the root (``..`` everywhere, encodings,
  absolute and Windows paths, NUL, over-long, Unicode look-alikes, symlinks, swapped files);
* ``build_secret_repo``: the fake-secret corpus planted in code, config, Markdown, comments and
  headings, plus the credential files the walker must skip;
* ``traffic_cases``: malformed JSON-RPC messages, each followed by ``follow_up()``;
* ``damage_targets``: every file of an index folder, to delete, truncate or fill with garbage.

``tests/hostile_io.py`` runs them (sessions, raw transports, consistency checks).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from rag_mcp.index.spans import digest

HASH = "test-hash-64"
CANARY = "OUTSIDE-THE-ROOT-c4n4ry"  # the first line of every file planted outside the root
PASSWD_MARK = "root:x:0:0"

# --- path escapes --------------------------------------------------------------------------------

REPO_FILES = {
    "src/app/spans.py": '''
        """Span IDs for the demo app."""


        def parse_span_id(span_id: str) -> tuple[str, int]:
            """Split a span ID into its path and start line."""
            path, rng, _digest = span_id.rsplit(":", 2)
            return path, int(rng.split("-")[0])
        ''',
    "src/app/retry.py": '''
        def retry(fn, attempts=3):
            """Call fn until it succeeds."""
            for _ in range(attempts):
                try:
                    return fn()
                except OSError:
                    pass
            return fn()
        ''',
    "docs/install.md": "# Installing\n\nRun `make install`.\n",
    # Files swapped for something else after indexing (``swap_after_index``).
    "swap/file.py": "def swapped_file():\n    return 'inside'\n",
    "swapdir/inner/mod.py": "def swapped_dir():\n    return 'inside'\n",
    "swapfifo/pipe.py": "def becomes_a_fifo():\n    return 'inside'\n",
}


@dataclass
class PathFixture:
    base: Path
    root: Path
    outside: Path
    #: label -> catalog ID of a file that is swapped for a symlink or a FIFO after indexing
    swapped: dict[str, str] = field(default_factory=dict)


def build_path_repo(base: Path) -> PathFixture:
    """The repository, a sibling folder outside it, and symlinks from one into the other."""
    root, outside = base / "repo", base / "outside"
    for rel, text in REPO_FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "secret.txt").write_text(f"{CANARY}\npassword = outside-only\n")
    # Same text as the files inside, so a swapped path still matches its indexed digest.
    (outside / "file.py").write_text(REPO_FILES["swap/file.py"])
    (outside / "inner").mkdir(exist_ok=True)
    (outside / "inner" / "mod.py").write_text(REPO_FILES["swapdir/inner/mod.py"])
    links = {"link_etc": "/etc", "link_sibling": "../outside", "src/link_up": "../..",
             "docs/passwd.md": "/etc/passwd", "src/app/secret.py": "../../../outside/secret.txt",
             "link_abs": str(outside)}
    for rel, target in links.items():
        os.symlink(target, root / rel)
    return PathFixture(base, root, outside)


def swap_after_index(fx: PathFixture, ids: dict[str, str]) -> None:
    """Replace indexed files by a symlink, a directory by a symlink, a file by a FIFO."""
    fx.swapped = dict(ids)
    (fx.root / "swap" / "file.py").unlink()
    os.symlink(fx.outside / "file.py", fx.root / "swap" / "file.py")
    os.rename(fx.root / "swapdir", fx.base / "swapdir-away")
    os.symlink(fx.outside, fx.root / "swapdir")
    (fx.root / "swapfifo" / "pipe.py").unlink()
    os.mkfifo(fx.root / "swapfifo" / "pipe.py")


@dataclass(frozen=True)
class PathCase:
    family: str
    span_id: Any  # usually a string; other JSON types test type confusion

    @property
    def label(self) -> str:
        return f"{self.family}:{self.span_id!r}"[:120]


def _first_line_digest(path: Path, fallback: str = "0123456789ab") -> str:
    try:
        return digest(path.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0])
    except OSError:
        return fallback


_DOTS = ("\u2024", "\uff0e", "\ufe52", "\u0701", "\u3002", "\u2027", "\u00b7", "\u02d9")
_SLASHES = ("\u2215", "\u2044", "\uff0f", "\u29f8", "\u2571", "\u3033", "\u2216", "\uff3c")
_ENCODED_UP = ("%2e%2e%2f", "%2e%2e/", "..%2f", "%2e./", ".%2e/", "%252e%252e%252f",
               "%c0%ae%c0%ae/", "..%c0%af", "%2e%2e%5c", "..%255c", "%uff0e%uff0e/",
               "&#46;&#46;/", "..%00/", "%%32%65%%32%65/", "..;/", "%2E%2E%2F")


def path_cases(fx: PathFixture) -> list[PathCase]:
    """At least 200 crafted span IDs, each aimed outside the root or at a file it must not read.

    Every ID carries the digest of the file it aims at, so a reader that followed the path would
    find its "span" and answer; only the allow-list stands in the way.
    """
    d_out = _first_line_digest(fx.outside / "secret.txt")
    d_pw = _first_line_digest(Path("/etc/passwd"))
    d_in = _first_line_digest(fx.root / "src/app/spans.py")
    out: list[PathCase] = []

    def add(family: str, path: str, d: str = d_out, lines: str = "1-1") -> None:
        out.append(PathCase(family, f"{path}:{lines}:{d}"))

    # ".." in every position, from every depth
    for prefix in ("", "src/", "src/app/", "docs/", "nope/", "swapdir/inner/"):
        for n in range(1, 5):
            add("dotdot", prefix + "../" * n + "outside/secret.txt")
    for n in range(1, 9):
        add("dotdot", "../" * n + "etc/passwd", d_pw)
    for p in ("..", "../..", "src/..", "src/app/..", "src/app/spans.py/..",
              "src/../src/app/spans.py", "src/app/../app/spans.py", "./src/app/spans.py",
              "src/./app/spans.py",
              "src//app/spans.py", "src/app/spans.py/", "src/app/./spans.py", ".", "./",
              "...", "..../outside/secret.txt", ".. /outside/secret.txt", " ../outside/secret.txt",
              "../ outside/secret.txt", "src/app/spans.py/../../../outside/secret.txt"):
        add("dotdot", p, d_in if "spans.py" in p and "outside" not in p else d_out)
    # URL- and double-encoded traversal
    for enc in _ENCODED_UP:
        for n in (1, 3):
            add("encoded", enc * n + "outside/secret.txt")
    for p in ("%2fetc%2fpasswd", "%252fetc%252fpasswd", "..%2f..%2f..%2fetc%2fpasswd",
              "src%2f..%2f..%2foutside%2fsecret.txt"):
        add("encoded", p, d_pw if "passwd" in p else d_out)
    # absolute paths and other schemes
    for p in ("/etc/passwd", "//etc/passwd", "///etc/passwd", "/etc/shadow", "/etc/hostname",
              "/proc/self/environ", "/proc/self/cmdline", "/proc/self/fd/0", "/dev/zero",
              "/dev/stdin", str(fx.outside / "secret.txt"), str(fx.root / "src/app/spans.py"),
              "file:///etc/passwd", "file://localhost/etc/passwd", "~/.ssh/id_rsa",
              "~root/.bashrc", "$HOME/.netrc", "${HOME}/.aws/credentials", "/root/.bash_history",
              "/tmp/../etc/passwd"):
        add("absolute", p, d_pw if "passwd" in p else d_in if "spans" in p else d_out)
    # Windows separators, drive letters, UNC and device names
    for p in ("..\\outside\\secret.txt", "..\\..\\etc\\passwd", "src\\..\\..\\outside\\secret.txt",
              "src/app\\..\\..\\..\\outside/secret.txt", "C:\\Windows\\win.ini",
              "C:/Windows/win.ini", "c:secret.txt", "C:..\\outside\\secret.txt",
              "\\\\server\\share\\secret.txt", "\\\\?\\C:\\Windows\\win.ini", "\\\\.\\pipe\\x",
              "\\etc\\passwd", "CON", "NUL", "AUX:", "src/app/spans.py::$DATA", "Z:/",
              "..\\/..\\/outside/secret.txt", "src\\app\\spans.py", "D:\\..\\..\\secret.txt"):
        add("windows", p, d_in if "spans" in p else d_out)
    # NUL bytes
    for p in ("src/app/spans.py\x00", "\x00../../etc/passwd", "../\x00/outside/secret.txt",
              "src/app/spans.py\x00.md", "src/\x00/app/spans.py", "\x00"):
        add("nul", p, d_in)
    out.append(PathCase("nul", f"src/app/spans.py:1-1:{d_in}\x00"))
    out.append(PathCase("nul", f"src/app/spans.py:1-1\x00:{d_in}"))
    # over-long IDs, components and line numbers
    for p in ("a/" * 540 + "x", "a/" * 548 + "x", "x" * 1100, "../" * 400 + "etc/passwd",
              "a" * 300 + ".py", "a/" * 2000 + "../" * 2000 + "outside/secret.txt",
              "x" * 100_000):
        add("overlong", p)
    for lines in ("999999999-999999999", "1-9999999999", "0-0", "5-1", "-1-2", "1--2", "1-2-3",
                  "01-02", "1.0-2.0", "0x1-0x2", "１-２"):
        add("overlong", "../outside/secret.txt", d_out, lines)
    # Unicode look-alikes of "." and "/" (NFKC folds several of them to ASCII)
    for d in _DOTS:
        add("unicode", (d * 2 + "/") * 2 + "outside/secret.txt")
        add("unicode", "../" + d * 2 + "/outside/secret.txt")
    for s in _SLASHES:
        add("unicode", ".." + s + "outside" + s + "secret.txt")
        add("unicode", "src/app" + s + ".." + s + ".." + s + ".." + s + "outside/secret.txt")
    for p in ("\u2025/outside/secret.txt", "\uff0e\uff0e\uff0f\uff0e\uff0e\uff0fetc\uff0fpasswd",
              "src/app/\u200bspans.py", "src/app/spans\u200d.py", "src/app/\u202eyp.snaps",
              ".\u0338./outside/secret.txt", "src/app/spa\u0301ns.py",
              "\u0455rc/\u0430pp/spans.py", "src/app/spans.py\ufeff",
              "\ufeff../outside/secret.txt", "..\u2028/outside/secret.txt",
              "\u2026/outside/secret.txt"):
        add("unicode", p, d_in if "spans" in p else d_out)
    # symlinks inside the repository pointing out of it
    for p, d in (("link_etc/passwd", d_pw), ("link_etc/hostname", d_out),
                 ("link_sibling/secret.txt", d_out), ("src/link_up/outside/secret.txt", d_out),
                 ("docs/passwd.md", d_pw), ("src/app/secret.py", d_out),
                 ("link_sibling/file.py", _first_line_digest(fx.outside / "file.py")),
                 ("link_abs/secret.txt", d_out), ("src/link_up/repo/src/app/spans.py", d_in),
                 ("link_sibling/inner/mod.py", _first_line_digest(fx.outside / "inner/mod.py"))):
        add("symlink", p, d)
    for sid in fx.swapped.values():  # indexed files replaced after indexing
        out.append(PathCase("swapped", sid))
    # shape and type confusion
    for sid in (f"src/app/spans.py:1-1:{d_in}:extra", f"src/app/spans.py:1-1:{d_in.upper()}",
                "src/app/spans.py:1-1:xyz", "src/app/spans.py", "", f":1-1:{d_in}",
                f"src/app/spans.py:1-1:{d_in}\n", f"src/app/spans.py\n../../etc/passwd:1-1:{d_pw}",
                f" ../outside/secret.txt:1-1:{d_out}", f"src/app/spans.py:1-1:{d_in} ",
                "../outside/secret.txt", f"src/*/spans.py:1-1:{d_in}", f"**/*:1-1:{d_in}",
                f"src/app/[s]pans.py:1-1:{d_in}", f"src/{{app,..}}/spans.py:1-1:{d_in}",
                f"$(cat /etc/passwd):1-1:{d_pw}", f"`id`:1-1:{d_in}",
                f"src/app/spans.py;cat /etc/passwd:1-1:{d_pw}"):
        out.append(PathCase("shape", sid))
    for value in (42, None, [], {}, True, 1.5, ["../outside/secret.txt:1-1:" + d_out],
                  {"path": "../outside/secret.txt"}):
        out.append(PathCase("type", value))
    return out


def escaped(output: str) -> bool:
    """Whether a tool's output shows content from outside the root."""
    return CANARY in output or PASSWD_MARK in output


# --- secrets -------------------------------------------------------------------------------------


def load_corpus() -> ModuleType:
    """tests/fixtures/secrets/corpus.py (not a package: the fixtures folder is not collected)."""
    name = "secret_corpus"
    if name in sys.modules:
        return sys.modules[name]
    path = Path(__file__).parent / "fixtures" / "secrets" / "corpus.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@dataclass
class SecretRepo:
    root: Path
    planted: list[tuple[str, str, str]]  # (repo path, kind, secret) in files that are indexed
    skipped: list[tuple[str, str]]  # (repo path, secret) in files the walker must skip

    def secrets(self) -> list[str]:
        return [s for _, _, s in self.planted] + [s for _, s in self.skipped]


def needles(secret: str) -> list[str]:
    """The strings whose presence in any output is a leak: the secret, or for a multi-line key
    each line of key material (a partly redacted key still leaks its lines)."""
    if "\n" not in secret:
        return [secret]
    pieces = secret.replace("\\n", "\n").split("\n")
    return [p.strip() for p in pieces if len(p.strip()) >= 24 and not p.startswith("-----")]


def build_secret_repo(root: Path) -> SecretRepo:
    corpus = load_corpus()
    F = corpus.F
    placed = corpus.write_tree(root)
    planted: list[tuple[str, str, str]] = []
    skipped: list[tuple[str, str]] = []
    for path, case in placed:
        rel = path.relative_to(root).as_posix()
        planted.append((rel, case.kind, case.secret))
    extra = {  # secrets where the catalog keeps metadata: headings, symbols, previews
        "docs/deploy.md": ("## Rotate {github_pat} before release\n\nOld tokens are revoked.\n\n"
                           "### Keys like {aws_access_key_id} go to the vault\n\nAsk ops.\n"),
        "docs/notes.rst": ("Slack {slack_bot}\n" + "=" * 60 + "\n\nThe bot token above was "
                           "revoked.\n"),
        "src/config_loader.py": ('class Config:\n    """Loads settings; the default token is '
                                 '{stripe_live}."""\n\n    def token(self) -> str:\n'
                                 '        return "{npm_token}"\n'),
    }
    for rel, tpl in extra.items():
        text = tpl.format(**F)
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        for name in ("github_pat", "aws_access_key_id", "slack_bot", "stripe_live", "npm_token"):
            if F[name] in text:
                planted.append((rel, name, F[name]))
    # A token in a file name: the file stays indexed, its name is masked wherever it is shown.
    for name, tpl in (("github_pat", "keys/{s}.txt"), ("openai_api_key", "notes/{s}.md"),
                      ("digitalocean", "infra/do-{s}.tf")):
        secret = F[name] if name in F else corpus.VENDORS.FORMATS[name][1]
        kind = next(c.kind for c in corpus.CASES if c.secret == secret)
        rel = tpl.format(s=secret)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("# Deploy notes\n\nRotated quarterly by the release bot.\n")
        planted.append((rel, kind, secret))
    # Credential files by name or content: never indexed, whatever they hold.
    skip_files = {
        ".env": "GITHUB_TOKEN={github_fine_grained}\n",
        "config/.env.production": "STRIPE_KEY={stripe_restricted}\n",
        "deploy/id_rsa": "{pem_rsa}\n", "deploy/id_ed25519": "{pem_openssh}\n",
        "credentials.json": '{{"token": "{gitlab_pat}"}}\n',
        ".aws/credentials": "[default]\naws_secret_access_key = {aws_secret_access_key}\n",
        ".npmrc": "//registry.npmjs.org/:_authToken={npm_token}\n",
        "certs/server.key": "{pem_ec}\n", "certs/tls.pem": "{pem_pkcs8}\n",
        "infra/prod.tfvars": 'db_password = "{password}"\n',
        ".netrc": "machine api.acme.test login ci password {password_human}\n",
        ".pgpass": "db.internal:5432:shop:app:{password}\n",
        ".git-credentials": "https://ci:{github_oauth_token}@github.com\n",
        "keys/service-account-prod.json": '{{"private_key": "{openai_api_key}"}}\n',
        "secrets.yaml": "slack: {slack_user}\n", ".docker/config.json":
            '{{"auths": {{"ghcr.io": {{"auth": "{basic_auth}"}}}}}}\n',
        ".kube/config": "users:\n- name: admin\n  user:\n    token: {jwt}\n",
        "notes/deploy_key.txt": "{pem_encrypted}\n", "vault.kdbx": "{sendgrid_api_key}\n",
        ".envrc": "export HF_TOKEN={huggingface_token}\n",
    }
    for rel, tpl in skip_files.items():
        text = tpl.format(**F)
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        secret = next(F[k] for k in F if F[k] in text)
        skipped.append((rel, secret))
    # The corpus writes .env/.pem cases and files that open with a private key too: the walker
    # skips those by name or content; keep them apart.
    from indexers.walk import check_content, secret_file_reason

    def skips(rel: str) -> bool:
        return bool(secret_file_reason(rel)) or check_content(
            rel, (root / rel).read_bytes()) == "secret"

    skipped += [(r, s) for r, _, s in planted if skips(r)]
    planted = [(r, k, s) for r, k, s in planted if not skips(r)]
    return SecretRepo(root, planted, skipped)


def leaks(output: str | bytes, repo: SecretRepo) -> list[str]:
    """The planted secrets (by needle) found in ``output``."""
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    found = []
    for secret in dict.fromkeys(repo.secrets()):
        for n in needles(secret):
            if n in text:
                found.append(n[:40])
                break
    return found


# --- malformed traffic ---------------------------------------------------------------------------

FOLLOW_UP_ID = 424242  # the valid request sent after every hostile one
BIG = 10 * 1024 * 1024


def _msg(obj: object) -> bytes:
    import json

    return json.dumps(obj, separators=(",", ":")).encode()


def _call(name: object, arguments: object, rid: object = 7) -> bytes:
    return _msg({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                 "params": {"name": name, "arguments": arguments}})


def _nested(depth: int, open_: bytes = b'{"a":', close: bytes = b"}") -> bytes:
    return open_ * depth + b"1" + close * depth


def traffic_cases() -> list[tuple[str, bytes]]:
    """(name, one JSON-RPC message as bytes, or something that tries to be one)."""
    ping = b'{"jsonrpc":"2.0","id":8,"method":"ping"}'
    q = {"query": "retry"}
    cases: list[tuple[str, bytes]] = [
        # invalid JSON
        ("json:open_brace", b"{"), ("json:close_brace", b"}"), ("json:prose", b"not json"),
        ("json:truncated", b'{"jsonrpc":"2.0","id":1,'), ("json:open_list", b"["),
        ("json:empty_list", b"[]"), ("json:null", b"null"), ("json:number", b"123"),
        ("json:string", b'"ping"'), ("json:single_quotes", b"{'jsonrpc': '2.0', 'id': 1}"),
        ("json:trailing_comma", b'{"jsonrpc":"2.0","id":1,"method":"ping",}'),
        ("json:two_objects", ping + ping), ("json:blank", b"   "),
        ("json:comment", b'{"jsonrpc":"2.0", /* x */ "id":1,"method":"ping"}'),
        # wrong types
        ("type:jsonrpc_1", b'{"jsonrpc":"1.0","id":1,"method":"ping"}'),
        ("type:jsonrpc_number", b'{"jsonrpc":2,"id":1,"method":"ping"}'),
        ("type:id_object", b'{"jsonrpc":"2.0","id":{},"method":"ping"}'),
        ("type:id_list", b'{"jsonrpc":"2.0","id":[1],"method":"ping"}'),
        ("type:id_bool", b'{"jsonrpc":"2.0","id":true,"method":"ping"}'),
        ("type:method_number", b'{"jsonrpc":"2.0","id":1,"method":5}'),
        ("type:method_null", b'{"jsonrpc":"2.0","id":1,"method":null}'),
        ("type:params_list", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}'),
        ("type:params_string", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}'),
        ("type:name_number", _call(5, q)), ("type:arguments_string", _call("rag_query", "x")),
        ("type:arguments_list", _call("rag_query", ["retry"])),
        ("type:arguments_null", _call("rag_query", None)),
        ("type:query_number", _call("rag_query", {"query": 5})),
        ("type:query_list", _call("rag_query", {"query": ["a"]})),
        ("type:query_object", _call("rag_query", {"query": {"$ne": ""}})),
        ("type:k_string", _call("rag_query", {"query": "x", "k": "five"})),
        ("type:k_float", _call("rag_query", {"query": "x", "k": 1.5})),
        ("type:k_negative", _call("rag_query", {"query": "x", "k": -1})),
        ("type:k_huge", _call("rag_query", {"query": "x", "k": 10**30})),
        ("type:tau_string", _call("rag_query", {"query": "x", "tau": "high"})),
        ("type:include_text_string", _call("rag_query", {"query": "x", "include_text": "yes"})),
        ("type:kind_unknown", _call("rag_query", {"query": "x", "kind": "binary"})),
        ("type:path_number", _call("rag_query", {"query": "x", "path": 5})),
        ("type:span_id_number", _call("rag_get_span", {"span_id": 5})),
        ("type:context_string", _call("rag_get_span", {"span_id": "a:1-1:0123456789ab",
                                                       "context_lines": "lots"})),
        ("type:context_huge", _call("rag_get_span", {"span_id": "a:1-1:0123456789ab",
                                                     "context_lines": 10**9})),
        ("type:context_negative", _call("rag_get_span", {"span_id": "a:1-1:0123456789ab",
                                                         "context_lines": -1})),
        ("type:id_huge_float", b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}'),
        ("type:id_5000_digits", b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}'),
        ("type:k_nan", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":'
                       b'"rag_query","arguments":{"query":"x","tau":NaN}}}'),
        ("type:k_infinity", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":'
                            b'"rag_query","arguments":{"query":"x","k":Infinity}}}'),
        # missing and extra fields
        ("missing:jsonrpc", b'{"id":1,"method":"ping"}'),
        ("missing:method", b'{"jsonrpc":"2.0","id":1}'),
        ("missing:params", b'{"jsonrpc":"2.0","id":1,"method":"tools/call"}'),
        ("missing:name", _msg({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                               "params": {"arguments": q}})),
        ("missing:arguments", _msg({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                    "params": {"name": "rag_health"}})),
        ("missing:query", _call("rag_query", {})), ("missing:span_id", _call("rag_get_span", {})),
        ("missing:question", _msg({"jsonrpc": "2.0", "id": 1, "method": "prompts/get",
                                   "params": {"name": "explain_code", "arguments": {}}})),
        ("extra:top_level", b'{"jsonrpc":"2.0","id":1,"method":"ping","evil":true}'),
        ("extra:params", _msg({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                               "params": {"name": "rag_health", "arguments": {}, "x": 1}})),
        ("extra:tool_argument", _call("rag_query", {"query": "x", "rm": "-rf /"})),
        ("extra:health_argument", _call("rag_health", {"verbose": True})),
        # unknown tools and methods
        ("unknown:method", b'{"jsonrpc":"2.0","id":1,"method":"tools/destroy"}'),
        ("unknown:method_write", b'{"jsonrpc":"2.0","id":1,"method":"resources/write"}'),
        ("unknown:method_empty", b'{"jsonrpc":"2.0","id":1,"method":""}'),
        ("unknown:method_long", _msg({"jsonrpc": "2.0", "id": 1, "method": "x" * 100_000})),
        ("unknown:tool", _call("rm_rf", {})), ("unknown:tool_traversal", _call("../rag_query", q)),
        ("unknown:tool_case", _call("RAG_QUERY", q)), ("unknown:tool_empty", _call("", q)),
        ("unknown:tool_long", _call("t" * 100_000, q)),
        ("unknown:resource_file", _msg({"jsonrpc": "2.0", "id": 1, "method": "resources/read",
                                        "params": {"uri": "file:///etc/passwd"}})),
        ("unknown:resource_traversal", _msg({"jsonrpc": "2.0", "id": 1,
                                             "method": "resources/read",
                                             "params": {"uri": "rag://../../etc/passwd"}})),
        ("unknown:prompt", _msg({"jsonrpc": "2.0", "id": 1, "method": "prompts/get",
                                 "params": {"name": "nope"}})),
        ("type:prompt_question_long", _msg({"jsonrpc": "2.0", "id": 1, "method": "prompts/get",
                                            "params": {"name": "explain_code",
                                                       "arguments": {"question": "q" * 9000}}})),
        ("unknown:log_level", _msg({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel",
                                    "params": {"level": "everything"}})),
        ("unknown:notification", b'{"jsonrpc":"2.0","method":"notifications/evil"}'),
        ("unknown:cancel_nothing", _msg({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                         "params": {"requestId": 31337}})),
        ("unknown:response_to_nothing", b'{"jsonrpc":"2.0","id":999,"result":{}}'),
        ("unknown:error_to_nothing", b'{"jsonrpc":"2.0","id":998,"error":{"code":1,'
                                     b'"message":"x"}}'),
        ("unknown:batch", b"[" + ping + b"," + ping + b"]"),
        ("unknown:reinitialize", _msg({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                       "params": {"protocolVersion": "1999-01-01",
                                                  "capabilities": {},
                                                  "clientInfo": {"name": "x", "version": "0"}}})),
        # 10 MB arguments
        ("big:query", _call("rag_query", {"query": "a" * BIG})),
        ("big:span_id", _call("rag_get_span", {"span_id": "a" * BIG + ":1-1:0123456789ab"})),
        ("big:extra_argument", _call("rag_query", {"query": "x", "pad": "p" * BIG})),
        ("big:many_keys", _call("rag_query", {"query": "x",
                                              **{f"k{i}": i for i in range(200_000)}})),
        # deeply nested JSON
        ("nested:arguments_64", _call("rag_query", {"query": "x", "deep": {}}).replace(
            b'"deep":{}', b'"deep":' + _nested(64))),
        ("nested:arguments_1000", _call("rag_query", {"query": "x", "deep": {}}).replace(
            b'"deep":{}', b'"deep":' + _nested(1000))),
        ("nested:lists_100000", _call("rag_query", {"query": "x", "deep": {}}).replace(
            b'"deep":{}', b'"deep":' + _nested(100_000, b"[", b"]"))),
        ("nested:query_as_object", _call("rag_query", {"query": {}}).replace(
            b'"query":{}', b'"query":' + _nested(5000))),
        ("nested:bare", _nested(200_000, b"[", b"]")),
        # control characters and invalid UTF-8
        ("ctl:escaped_controls", _call("rag_query", {"query": "".join(map(chr, range(32)))
                                                     + "retry"})),
        ("ctl:ansi_escape", _call("rag_query", {"query": "\x1b[2J\x1b[31mretry\x07"})),
        ("ctl:raw_control_in_string", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'
                                      b'{"name":"rag_query","arguments":{"query":"a\x01\x1bb"}}}'),
        ("ctl:nul_in_query", _call("rag_query", {"query": "retry\x00/etc/passwd"})),
        ("ctl:nul_byte_raw", b'{"jsonrpc":"2.0",\x00"id":1,"method":"ping"}'),
        ("ctl:line_separators", _call("rag_query", {"query": "retry\u2028\u2029\u0085x"})),
        ("ctl:tool_name_escape", _call("\x1b]0;pwned\x07", q)),
        ("utf8:invalid_bytes", b"\xff\xfe\xfd"),
        ("utf8:invalid_in_string", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'
                                   b'{"name":"rag_query","arguments":{"query":"\xff\xc0\xae"}}}'),
        ("utf8:truncated_multibyte", b'{"jsonrpc":"2.0","id":1,"method":"ping","x":"\xe2\x82"}'),
        ("utf8:overlong_slash", _call("rag_get_span", {"span_id": "x"}).replace(
            b'"x"', b'"\xc0\xaf..\xc0\xafetc:1-1:0123456789ab"')),
        ("utf8:lone_surrogate", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'
                                b'{"name":"rag_query","arguments":{"query":"\\ud800retry"}}}'),
        ("utf8:lone_surrogate_id", b'{"jsonrpc":"2.0","id":"\\udfff","method":"ping"}'),
        ("utf8:lone_surrogate_key", b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'
                                    b'{"name":"rag_query","arguments":{"query":"x","\\ud800":1}}}'),
        ("utf8:bom", b"\xef\xbb\xbf" + ping),
        ("utf8:utf16", ping.decode().encode("utf-16")),
    ]
    return cases


def follow_up() -> bytes:
    """The valid request that must be answered after each hostile one."""
    return _call("rag_query", {"query": "retry with backoff", "k": 1}, FOLLOW_UP_ID)


# --- damaged index -------------------------------------------------------------------------------

DAMAGES = ("delete", "truncate", "garbage")


def damage_targets(index_dir: Path) -> list[str]:
    """Every file under an index folder (relative paths), the shared embedding cache included."""
    return sorted(p.relative_to(index_dir).as_posix() for p in index_dir.rglob("*") if p.is_file())


def damage(path: Path, how: str) -> None:
    """Delete the file, cut it to half its size, or overwrite it with random bytes."""
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        os.truncate(path, path.stat().st_size // 2)
    elif how == "garbage":
        size = max(path.stat().st_size, 64)
        path.write_bytes(os.urandom(size))
    else:
        raise ValueError(how)
