"""indexers.walk: which files get indexed. Real trees in tmp_path; git itself is the oracle."""

from __future__ import annotations

import os
import random
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from indexers.walk import Candidate, IgnoreMatcher, check_content, secret_file_reason, walk
from rag_mcp.errors import InvalidArgument

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def make(root: Path, files: Mapping[str, str | bytes]) -> None:
    for rel, body in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            p.write_bytes(body)
        else:
            p.write_text(body, encoding="utf-8")


def run(root: Path, **kw) -> tuple[set[str], dict[str, str]]:
    """Indexed paths and {skipped path: reason} of one walk."""
    skips: dict[str, str] = {}
    res = walk(root, on_skip=skips.__setitem__, **kw)
    assert sum(res.skipped.values()) == len(skips)
    return {c.rel for c in res.files}, skips


def git(cwd: Path, *args: str, check: bool = True) -> str:
    # No user or system config: a developer's core.excludesFile must not change the oracle.
    nowhere = "/nonexistent/rag-mcp-test-home"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": nowhere,
        "XDG_CONFIG_HOME": nowhere, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    out = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=check)
    return out.stdout.decode("utf-8", "surrogateescape") if out.returncode == 0 else ""


def git_untracked(cwd: Path, ignored: bool = False) -> set[str]:
    args = ["ls-files", "-z", "--others", "--exclude-standard"] + (["--ignored"] if ignored else [])
    return {p for p in git(cwd, *args).split("\0") if p}


def all_paths(root: Path) -> list[tuple[str, bool]]:
    """Every path under root (through pruned folders too, never through symlinks), is_dir."""
    out: list[tuple[str, bool]] = []
    todo = [""]
    while todo:
        d = todo.pop()
        for e in os.scandir(root / d):
            rel = f"{d}/{e.name}" if d else e.name
            is_dir = e.is_dir(follow_symlinks=False)
            out.append((rel, is_dir))
            if is_dir:
                todo.append(rel)
    return out


# ---- gitignore semantics ------------------------------------------------------------------------

def test_nested_gitignore_negation_dir_rules_anchors_and_globstar(tmp_path: Path) -> None:
    make(tmp_path, {
        ".gitignore": "*.log\n!keep.log\ngen/\n/top.txt\ndocs/**/draft.md\nmid/*.txt\n",
        "a.log": "x", "keep.log": "x", "top.txt": "x", "sub/top.txt": "x",
        "gen/x.py": "x", "sub/gen/y.py": "x", "gen.py": "x",
        "docs/draft.md": "x", "docs/a/b/draft.md": "x", "docs/readme.md": "x",
        "mid/a.txt": "x", "mid/deeper/a.txt": "x",
        "sub/.gitignore": "!*.log\nlocal.txt\n/anchored.py\n",
        "sub/b.log": "x", "sub/local.txt": "x", "sub/deep/local.txt": "x",
        "sub/anchored.py": "x", "sub/deep/anchored.py": "x", "other/b.log": "x",
    })
    files, skips = run(tmp_path)
    assert files == {
        ".gitignore", "keep.log", "sub/top.txt", "gen.py", "docs/readme.md", "mid/deeper/a.txt",
        "sub/.gitignore", "sub/b.log", "sub/deep/anchored.py",
    }
    # gen/ is a directory rule: the folders are pruned once, their files never listed
    assert skips["gen"] == skips["sub/gen"] == "gitignore"
    assert not any(p.startswith(("gen/", "sub/gen/")) for p in skips)


def test_file_cannot_be_reincluded_when_its_folder_is_excluded(tmp_path: Path) -> None:
    make(tmp_path, {
        ".gitignore": "logs/\n!logs/keep.txt\nout2/*\n!out2/keep.txt\n",
        "logs/keep.txt": "x", "logs/x.txt": "x", "out2/keep.txt": "x", "out2/x.txt": "x",
        # a negation inside an excluded folder is never even read
        "logs/.gitignore": "!x.txt\n",
    })
    files, skips = run(tmp_path)
    assert files == {".gitignore", "out2/keep.txt"}
    assert skips == {"logs": "gitignore", "out2/x.txt": "gitignore"}


def test_git_info_exclude(tmp_path: Path) -> None:
    make(tmp_path, {".git/info/exclude": "# local\n*.secretish\n/scratch/\n",
                    "a.secretish": "x", "scratch/n.md": "x", "src/scratch/n.md": "x"})
    files, skips = run(tmp_path)
    assert files == {"src/scratch/n.md"}
    assert skips == {".git": "vcs", "a.secretish": "gitignore", "scratch": "gitignore"}


def test_gitignore_beats_info_exclude_and_deeper_beats_shallower(tmp_path: Path) -> None:
    make(tmp_path, {".git/info/exclude": "*.txt\n", ".gitignore": "!a.txt\n",
                    "a.txt": "x", "b.txt": "x", "s/.gitignore": "a.txt\n", "s/a.txt": "x"})
    files, _ = run(tmp_path)
    assert files == {".gitignore", "a.txt", "s/.gitignore"}


def test_ragignore_at_any_level_can_reinclude_and_is_counted_apart(tmp_path: Path) -> None:
    make(tmp_path, {
        ".gitignore": "api.md\n", ".ragignore": "!api.md\nfixtures/\n",
        "api.md": "x", "fixtures/f.py": "x", "pkg/.ragignore": "*.snap\n",
        "pkg/a.snap": "x", "pkg/a.py": "x", "b.snap": "x",
    })
    files, skips = run(tmp_path)
    assert files == {".gitignore", ".ragignore", "api.md", "pkg/.ragignore", "pkg/a.py", "b.snap"}
    assert skips == {"fixtures": "ragignore", "pkg/a.snap": "ragignore"}


def test_extra_ignore_is_root_relative_and_wins(tmp_path: Path) -> None:
    make(tmp_path, {".gitignore": "*.md\n", "docs/a.md": "x", "docs/a.py": "x",
                    "sub/docs/a.py": "x", "notes.txt": "x", "sub/notes.txt": "x"})
    files, skips = run(tmp_path, extra_ignore=["docs/*.py", "*.txt", "!docs/a.md"])
    assert files == {".gitignore", "docs/a.md", "sub/docs/a.py"}
    assert skips["docs/a.py"] == skips["notes.txt"] == skips["sub/notes.txt"] == "ragignore"


def test_symlinked_gitignore_is_not_followed_like_git(tmp_path: Path) -> None:
    make(tmp_path, {"rules": "*.txt\n", "a.txt": "x"})
    (tmp_path / ".gitignore").symlink_to(tmp_path / "rules")
    files, _ = run(tmp_path)
    assert "a.txt" in files


# ---- git itself as the oracle -------------------------------------------------------------------

TRICKY = {
    ".gitignore": (
        "# comment\n\\#hash.txt\n\\!bang.txt\n*.log\n!important.log\nbuild-*/\n/root-only.txt\n"
        "**/deep/*.tmp\nlib/**\n!lib/keep/\n!lib/keep/**\na/**/z.txt\n*.[oa]\n[!x]y.txt\n"
        "sp\\ ace.txt\ntrail.txt   \n**/cache\n*.bak/\ndoc/*.txt\n!doc/ok.txt\nv**/w.txt\n"
        "[]x]z.txt\n\r\n"
    ),
    "#hash.txt": "x", "!bang.txt": "x", "x.log": "x", "important.log": "x", "n/important.log": "x",
    "build-1/a.c": "x", "build-1.c": "x", "root-only.txt": "x", "n/root-only.txt": "x",
    "n/deep/a.tmp": "x", "deep/b.tmp": "x", "lib/a.c": "x", "lib/keep/b.c": "x", "lib/c/d.c": "x",
    "a/z.txt": "x", "a/b/c/z.txt": "x", "q/a/z.txt": "x", "m.o": "x", "m.a": "x", "m.c": "x",
    "ay.txt": "x", "xy.txt": "x", "sp ace.txt": "x", "trail.txt": "x", "n/cache/x.c": "x",
    "cache": "x", "f.bak": "x", "doc/a.txt": "x", "doc/ok.txt": "x", "doc/sub/b.txt": "x",
    "v/u/w.txt": "x", "vw.txt": "x", "u/v/w.txt": "x", "]z.txt": "x", "xz.txt": "x", "yz.txt": "x",
    "n/.gitignore": "!*.log\n*.c\n!/keep.c\n", "n/x.log": "x", "n/keep.c": "x", "n/y/keep.c": "x",
    "n/y/.gitignore": "!keep.c\n", "p/.gitignore": "*\n!*/\n!*.py\n", "p/q/a.py": "x",
    "p/q/a.txt": "x", "p/b.py": "x",
    ".git/info/exclude": "excluded-*\n", "excluded-1.txt": "x", "w/excluded-2/f.txt": "x",
}


def assert_git_parity(repo: Path, root: Path | None = None) -> None:
    root = root or repo
    files, skips = run(root)
    # a name with a backslash is skipped as bad_name: no span ID could carry it back
    assert files == {p for p in git_untracked(root) if "\\" not in p}
    ignored_by_git = git_untracked(root, ignored=True)
    matcher = IgnoreMatcher(root)
    for rel, is_dir in all_paths(root):
        if is_dir or rel.startswith(".git/") or rel == ".git":
            continue
        assert (matcher.is_ignored(rel) == "gitignore") == (rel in ignored_by_git), rel
    assert all(r in ("gitignore", "vcs", "bad_name") for r in skips.values())


def test_parity_with_git_on_tricky_patterns(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    make(repo, TRICKY)
    assert_git_parity(repo)
    assert_git_parity(repo, repo / "n")  # root inside a work tree: the ignore files above apply


def test_parity_with_git_in_a_linked_worktree(tmp_path: Path) -> None:
    repo, wt = tmp_path / "repo", tmp_path / "wt"
    git(tmp_path, "init", "-q", str(repo))
    make(repo, {"tracked.md": "x"})
    git(repo, "add", "tracked.md")
    git(repo, "commit", "-qm", "init")
    git(repo, "worktree", "add", "-q", str(wt))
    make(repo, {".git/info/exclude": "*.scratch\n"})
    make(wt, {"a.scratch": "x", "b.md": "x"})
    assert (wt / ".git").is_file()
    files, skips = run(wt)
    assert files == {"tracked.md", "b.md"}
    assert skips == {".git": "vcs", "a.scratch": "gitignore"}


# Pattern pieces chosen for git's corner cases: "**" next to text, "[]...]", bad classes,
# reversed ranges, escapes, unterminated sets, escaped and unescaped trailing spaces.
SEGMENTS = ["a", "b", "x", "y", "*", "**", "?", "*.txt", "*.log", "c.*", "[ab]", "[!x]", "[a-c]*",
            "d.log", "x*", "[[:alpha:]]", "***", "a**", "**b", "[]a]", "[!]]*", "\\a", "[a-]",
            "[x-a]", "[[:foo:]]", "[", "a\\", "*[0-9]", "?.log", "x1 ", "x1\\ ", "[a-c-e]"]
DIRS = ["a", "b", "x", "y", "x1"]
NAMES = ["a", "b", "c.txt", "d.log", "e.md", "x1", "]", "x1 ", "a-b", "9z", "-", "\\q"]


def random_pattern(rng: random.Random) -> str:
    pat = "/".join(rng.choice(SEGMENTS) for _ in range(rng.choice([1, 1, 2, 2, 3, 4])))
    if rng.random() < 0.25:
        pat = "/" + pat
    if rng.random() < 0.25:
        pat += "/"
    return ("!" if rng.random() < 0.35 else "") + pat


@pytest.mark.parametrize("seed", range(40))
def test_parity_with_git_on_random_trees_and_rules(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    files: dict[str, str | bytes] = {}
    dirs = {""}
    for _ in range(60):
        parts = [rng.choice(DIRS) for _ in range(rng.randint(0, 4))]
        rel = "/".join([*parts, rng.choice(NAMES)])
        prefixes = {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}
        if rel in dirs or prefixes & files.keys():
            continue  # a name cannot be a file and a folder at once
        files[rel] = "x"
        dirs |= prefixes
    for d in rng.sample(sorted(dirs), min(len(dirs), 4)):
        body = "\n".join(random_pattern(rng) for _ in range(rng.randint(1, 8))) + "\n"
        files[f"{d}/.gitignore" if d else ".gitignore"] = body
    if rng.random() < 0.3:
        files[".git/info/exclude"] = random_pattern(rng) + "\n"
    make(repo, files)
    assert_git_parity(repo)
    # A root below the top of the work tree, unless git ignores that folder itself.
    sub = rng.choice(sorted(dirs - {""}))
    if not git(repo, "check-ignore", sub, check=False) and (repo / sub).is_dir():
        assert_git_parity(repo, repo / sub)


# Every kind of pattern git knows, one or more of each, with paths that match and miss them:
# negation, directory-only rules, anchoring, "**" leading, inside and trailing, escapes, trailing
# spaces, sets and classes, nested files (deeper wins), info/exclude, and the two hostile lines
# that once kept rag-index busy for minutes.
CHECK_IGNORE = {
    ".gitignore": (
        "# comment\n*.log\n!keep.log\n/anchored.txt\ndocs/**/draft.md\n**/tmpdir/\nlogs/\n"
        "!logs/important.txt\na/**/z.txt\n\\#literal.txt\n\\!bang.txt\nsp\\ ace.txt\n"
        "trailing.txt   \nesc\\ \\ \n*.[oa]\nfile[0-9].txt\n[[:upper:]]*.cfg\n*~\n"
        "nested/*.md\n!nested/README.md\ndeep/**\n!deep/keep/\n!deep/keep/**\nx*/y?/\n"
        "**/cache\n\\*star\n[!a-m]only.txt\nq/*/\n"
        "*?*?*?*?*?*?*?*?*?*?*?*?b\n" + "**/" * 20 + "x\n\u00e9t\u00e9*.txt\n"
        # git compares bytes: "?" and a set take one byte of a two-byte character
        "caf?.txt\nn??.md\n[\u00e9]x\n"
    ),
    "sub/.gitignore": "!*.log\n*.tmp\n/only-here.txt\n!/anchored.txt\n",
    "sub/inner/.gitignore": "*\n!*/\n!*.py\n",
    ".git/info/exclude": "excluded-*\n",
}
CHECK_PATHS = [
    "a.log", "keep.log", "anchored.txt", "sub/anchored.txt", "other/anchored.txt", "docs/draft.md",
    "docs/x/y/draft.md", "docs/readme.md", "p/tmpdir/f.c", "tmpdir", "logs/important.txt",
    "logs/other.txt", "a/z.txt", "a/b/c/z.txt", "b/a/z.txt", "#literal.txt", "!bang.txt",
    "sp ace.txt", "trailing.txt", "esc  ", "m.o", "m.a", "m.c", "file1.txt", "fileX.txt",
    "Main.cfg", "main.cfg", "notes.txt~", "nested/a.md", "nested/README.md", "nested/deeper/b.md",
    "deep/f.c", "deep/keep/g.c", "deep/keep/h/i.c", "deep/other/j.c", "x1/y2/k.c", "x1/yy/k.c",
    "z/cache", "z/cache2", "*star", "astar", "zonly.txt", "aonly.txt", "q/r/s.c", "q/t.c",
    "a" * 40, "a" * 30 + "b", "s/" + "c" * 20 + "b", "x", "d1/d2/x", "d1/x/y.c",
    "\u00e9t\u00e9-1.txt",
    "sub/b.log", "sub/c.tmp", "sub/only-here.txt", "sub/d/only-here.txt", "sub/inner/a.py",
    "sub/inner/a.txt", "sub/inner/w/b.py", "sub/inner/w/b.md", "excluded-1.c", "w/excluded-2/f.c",
    "caf\u00e9.txt", "cafe.txt", "n\u00e9.md", "no.md", "ex", "\u00e9x",
]


def git_check_ignore(repo: Path, paths: list[str]) -> set[str]:
    """The paths git says are ignored (a path inside an ignored folder counts as ignored)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    out = subprocess.run(["git", "check-ignore", "--no-index", "--stdin", "-z", "-v", "-n"],
                         cwd=repo, env=env, input="\0".join(paths).encode(),
                         capture_output=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    fields = out.stdout.decode().split("\0")
    records = [fields[i:i + 4] for i in range(0, len(fields) - 1, 4)]
    assert [path for *_, path in records] == paths
    return {path for _, _, pattern, path in records if pattern and not pattern.startswith("!")}


def test_matcher_agrees_with_git_check_ignore(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    make(repo, {**CHECK_IGNORE, **{p: "x" for p in CHECK_PATHS}})
    paths = sorted(rel for rel, _ in all_paths(repo) if rel.split("/")[0] != ".git")
    dirs = {rel for rel, is_dir in all_paths(repo) if is_dir}
    ignored = git_check_ignore(repo, paths)
    assert 25 < len(ignored) < len(paths) - 25  # both answers are well represented
    matcher = IgnoreMatcher(repo)
    got = {rel for rel in paths if matcher.is_ignored(rel, rel in dirs) == "gitignore"}
    assert got == ignored


def test_rules_split_over_several_sets_keep_the_last_match(monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """When RE2's memory cap forces one file's rules into several sets, the last matching rule
    still decides, and a rule too large alone is left out without losing the others."""
    from indexers import ignore_rules

    monkeypatch.setattr(ignore_rules, "_SET_MEMORY", 1 << 16)
    text = "\n".join([f"*.e{i}" for i in range(300)] + ["!keep.e7", "big" + "?" * 3000])
    stack = ignore_rules.parse_ignore(text)
    assert len(stack) == 1

    def verdict(path: bytes) -> bool | None:
        rule = ignore_rules.first_match(stack, path, False)
        return None if rule is None else not rule.negated

    assert [verdict(p) for p in (b"a.e5", b"keep.e7", b"x/a.e299", b"none")] == [
        True, False, True, None]
    assert len(stack[0]._sets[0] or []) > 1  # the split happened


def test_patterns_longer_than_any_path_are_left_out_and_globstars_fold() -> None:
    from indexers.ignore_rules import encode, first_match, parse_ignore, translate

    assert parse_ignore("?" * 4097 + "\n") == ()
    fits = parse_ignore("?" * 4096 + "\n")
    assert first_match(fits, b"a" * 4096, False) is not None
    assert translate(b"a/**/**/**/b", basename=False) == translate(b"a/**/b", basename=False)
    long_globstar = parse_ignore("**/" * 50_000 + "x\n")  # 150 kB, one line
    assert first_match(long_globstar, encode("d/" * 40 + "x"), False) is not None


# ---- rag-mcp's own rules ------------------------------------------------------------------------

@pytest.mark.parametrize(("rel", "reason"), [
    (".git/config", "vcs"), (".hg/store", "vcs"),
    ("node_modules/p/i.js", "vendored"), ("web/bower_components/j.js", "vendored"),
    ("vendor/github.com/x/y.go", "vendored"), (".venv/lib/site.py", "vendored"),
    ("venv/lib/site.py", "vendored"), ("tools/myenv/pyvenv.cfg", "vendored"),
    ("envs/conda1/conda-meta/history", "vendored"),
    ("build/lib/m.py", "build_output"), ("dist/m.js", "build_output"),
    ("target/debug/m.rs", "build_output"), ("out/m.js", "build_output"),
    ("app/.next/m.js", "build_output"), (".nuxt/m.js", "build_output"),
    ("coverage/lcov.info", "build_output"), (".tox/py/m.py", "build_output"),
    (".mypy_cache/m.json", "build_output"), (".pytest_cache/v", "build_output"),
    ("pkg/__pycache__/m.py", "build_output"), (".gradle/m.txt", "build_output"),
    ("pkg.egg-info/PKG-INFO", "build_output"), ("cargo-out/CACHEDIR.TAG", "build_output"),
    ("Svc/bin/Debug/a.txt", "build_output"), ("Svc/obj/a.txt", "build_output"),
    (".rag/chroma/x.txt", "index_dir"),
])
def test_always_skipped_folders(tmp_path: Path, rel: str, reason: str) -> None:
    make(tmp_path, {rel: "x", "src/main.py": "x", "Svc/Svc.csproj": "<Project/>"})
    files, skips = run(tmp_path)
    assert files == {"src/main.py", "Svc/Svc.csproj"}
    assert list(skips.values()) == [reason]
    assert rel.startswith(next(iter(skips)) + "/")


def test_kept_folders_that_only_look_like_output(tmp_path: Path) -> None:
    make(tmp_path, {"third_party/lib/a.c": "x", "scripts/bin/run.sh": "x", "obj/model.py": "x",
                    "vendored_notes/a.md": "x", "buildtools/a.py": "x"})
    files, skips = run(tmp_path)
    assert len(files) == 5 and not skips


def test_custom_index_dir_is_skipped_and_default_rag_is_not(tmp_path: Path) -> None:
    make(tmp_path, {"idx/data.bin2": "x", ".rag/notes.md": "x", "a.py": "x"})
    files, skips = run(tmp_path, index_dir=tmp_path / "idx")
    assert files == {".rag/notes.md", "a.py"}
    assert skips == {"idx": "index_dir"}
    files, _ = run(tmp_path, index_dir=Path("idx"))  # relative: taken from the root
    assert "idx/data.bin2" not in files
    files, skips = run(tmp_path, index_dir=tmp_path.parent / "elsewhere")
    assert len(files) == 3 and not skips


@pytest.mark.parametrize(("name", "reason"), [
    ("package-lock.json", "lock_file"), ("yarn.lock", "lock_file"), ("pnpm-lock.yaml", "lock_file"),
    ("poetry.lock", "lock_file"), ("Cargo.lock", "lock_file"), ("Gemfile.lock", "lock_file"),
    ("composer.lock", "lock_file"), ("uv.lock", "lock_file"), ("go.sum", "lock_file"),
    ("app.min.js", "minified"), ("site.MIN.css", "minified"), ("app.js.map", "generated"),
    ("msg_pb2.py", "generated"), ("msg.pb.go", "generated"), ("api.generated.ts", "generated"),
    ("logo.png", "binary_ext"), ("a.tar.gz", "binary_ext"), ("f.woff2", "binary_ext"),
    ("m.o", "binary_ext"), ("m.pyc", "binary_ext"), ("lib.so", "binary_ext"),
    ("A.class", "binary_ext"), ("x.jar", "binary_ext"), ("m.wasm", "binary_ext"),
    ("clip.mp4", "binary_ext"), ("spec.xcf", "binary_ext"), ("data.sqlite3", "binary_ext"),
    ("PHOTO.JPG", "binary_ext"), (".DS_Store", "binary_ext"),
])
def test_files_skipped_by_name(tmp_path: Path, name: str, reason: str) -> None:
    make(tmp_path, {f"d/{name}": "x", "d/keep.py": "x"})
    files, skips = run(tmp_path)
    assert files == {"d/keep.py"}
    assert skips == {f"d/{name}": reason}


SECRETS = [
    ".env", ".env.local", ".env.production", "deploy/prod.env", "certs/server.pem", "tls.key",
    "a.p12", "b.pfx", "keys/id_rsa", "id_ed25519", "id_ecdsa_work", "id_dsa", "app.jks",
    "release.keystore", ".netrc", "_netrc", ".pypirc", ".git-credentials", "credentials.json",
    "home/.aws/credentials", ".docker/config.json", ".kube/config", "prod.tfvars",
    "gcloud/application_default_credentials.json", "config/secrets.yml", "secrets.yaml",
    "service-account-prod.json", "htpasswd", ".htpasswd", "infra/terraform.tfstate",
]
NOT_SECRETS = [".env.example", ".env.sample", ".env.template", "id_rsa.pub", "aws/credentials",
               ".npmrc", "environment.py", "kube/config", "docs/keys.md", "config.json"]


@pytest.mark.parametrize("rel", SECRETS)
def test_secret_files_are_skipped_and_counted(tmp_path: Path, rel: str) -> None:
    make(tmp_path, {rel: "TOKEN=hunter2\n", "a.py": "x"})
    res = walk(tmp_path)
    assert [c.rel for c in res.files] == ["a.py"]
    assert res.skipped == {"secret": 1}
    assert secret_file_reason(rel) == "secret"


@pytest.mark.parametrize("rel", NOT_SECRETS)
def test_lookalikes_are_not_secret_by_name(rel: str) -> None:
    assert secret_file_reason(rel) is None


def test_too_large_and_empty(tmp_path: Path) -> None:
    make(tmp_path, {"big.txt": "x" * 101, "edge.txt": "x" * 100, "empty.py": ""})
    files, skips = run(tmp_path, max_file_bytes=100)
    assert files == {"edge.txt"}
    assert skips == {"big.txt": "too_large", "empty.py": "empty"}


def test_candidates_are_sorted_and_carry_stat_fields(tmp_path: Path) -> None:
    make(tmp_path, {"b/z.py": "zz", "a.py": "a", "b/a.py": "abc"})
    res = walk(tmp_path)
    assert [c.rel for c in res.files] == ["a.py", "b/a.py", "b/z.py"]
    c = res.files[1]
    st = (tmp_path / "b/a.py").stat()
    assert c == Candidate("b/a.py", tmp_path / "b/a.py", 3, st.st_mtime_ns)


# ---- symlinks, special and unreadable entries ---------------------------------------------------

def test_symlinks_are_never_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "repo", tmp_path / "outside"
    make(outside, {"leak.py": "x"})
    make(root, {"src/real.py": "x"})
    (root / "etc").symlink_to("/etc")
    (root / "hosts").symlink_to("/etc/hostname")
    (root / "sibling").symlink_to(outside)
    (root / "sibling_file.py").symlink_to(outside / "leak.py")
    (root / "alias.py").symlink_to(root / "src/real.py")
    (root / "src/up").symlink_to("..")  # a loop if it were followed
    (root / "ping").symlink_to("pong")
    (root / "pong").symlink_to("ping")  # a cycle of links
    (root / "dangling").symlink_to("nowhere")
    files, skips = run(root)
    assert files == {"src/real.py"}
    assert skips == {
        "etc": "symlink_outside", "hosts": "symlink_outside", "sibling": "symlink_outside",
        "sibling_file.py": "symlink_outside", "alias.py": "symlink", "src/up": "symlink",
        "ping": "symlink", "pong": "symlink", "dangling": "symlink",
    }


def test_root_given_through_a_symlink(tmp_path: Path) -> None:
    make(tmp_path, {"repo/a.py": "x"})
    (tmp_path / "link").symlink_to(tmp_path / "repo")
    res = walk(tmp_path / "link")
    assert [c.rel for c in res.files] == ["a.py"] and not res.skipped


def test_fifo_is_skipped_without_being_opened(tmp_path: Path) -> None:
    make(tmp_path, {"a.py": "x"})
    os.mkfifo(tmp_path / "pipe.py")  # opening it would block the walk forever
    files, skips = run(tmp_path)
    assert files == {"a.py"} and skips == {"pipe.py": "special"}


def test_undecodable_file_name_is_skipped(tmp_path: Path) -> None:
    make(tmp_path, {"a.py": "x"})
    try:
        with open(os.path.join(os.fsencode(tmp_path), b"caf\xe9.py"), "wb") as fh:
            fh.write(b"x")
    except OSError:
        pytest.skip("file system refuses non-UTF-8 names")
    files, skips = run(tmp_path)
    assert files == {"a.py"} and list(skips.values()) == ["bad_name"]


def test_unreadable_folder_is_counted_not_fatal(tmp_path: Path, monkeypatch) -> None:
    make(tmp_path, {"ok/a.py": "x", "locked/b.py": "x"})
    real = os.scandir

    def scandir(path):  # the root user can read anything, so refuse the way the kernel would
        if Path(path) == tmp_path / "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    files, skips = run(tmp_path)
    assert files == {"ok/a.py"} and skips == {"locked": "unreadable"}


@pytest.mark.skipif(IS_ROOT, reason="permissions do not bind the root user")
def test_unreadable_file_and_folder_by_permissions(tmp_path: Path) -> None:
    make(tmp_path, {"a.py": "x", "secret_dir/b.py": "x", "locked.py": "x"})
    (tmp_path / "locked.py").chmod(0)
    (tmp_path / "secret_dir").chmod(0)
    try:
        files, skips = run(tmp_path)
    finally:
        (tmp_path / "secret_dir").chmod(stat.S_IRWXU)
    assert files == {"a.py"}
    assert skips == {"locked.py": "unreadable", "secret_dir": "unreadable"}


def test_missing_root_is_an_invalid_argument(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="not a directory"):
        walk(tmp_path / "nope")


# ---- the matcher agrees with the walk -----------------------------------------------------------

def test_matcher_agrees_with_walk_on_every_path(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    make(root, {**TRICKY, "node_modules/p/a.js": "x", "env2/pyvenv.cfg": "x", "env2/lib/a.py": "x",
                ".env": "x", ".env.example": "x", "app.min.js": "x", "logo.png": "x",
                "uv.lock": "x", "big.txt": "x" * 200, "empty.md": "", ".ragignore": "rag-*\n",
                "rag-out/a.md": "x", "Svc/Svc.csproj": "x", "Svc/bin/a.txt": "x",
                "third_party/z.c": "x", ".rag/x.md": "x"})
    (root / "link.py").symlink_to(root / "m.c")
    (root / "etc").symlink_to("/etc")
    files, skips = run(root, max_file_bytes=100, extra_ignore=["*.md", "!doc/*.md"])
    matcher = IgnoreMatcher(root, ["*.md", "!doc/*.md"], max_file_bytes=100)
    assert len(skips) > 30 and len(files) > 15
    for rel, is_dir in all_paths(root):
        parts = rel.split("/")
        expected = next((skips[p] for i in range(1, len(parts) + 1)
                         if (p := "/".join(parts[:i])) in skips), None)
        if is_dir:
            assert matcher.is_ignored(rel, is_dir=True) == expected, rel
            continue
        got = matcher.check(rel)
        if expected is None:
            assert rel in files and isinstance(got, Candidate) and got.rel == rel, rel
        else:
            assert got == expected, rel
            assert matcher.is_ignored(rel) in (expected, None)  # None: an lstat-level reason


def test_matcher_reset_picks_up_a_new_gitignore(tmp_path: Path) -> None:
    make(tmp_path, {"a/b/c.txt": "x"})
    m = IgnoreMatcher(tmp_path)
    assert m.is_ignored("a/b/c.txt") is None
    make(tmp_path, {"a/.gitignore": "b/\n"})
    m.reset()
    assert m.is_ignored("a/b/c.txt") == "gitignore"
    assert m.is_ignored("./a/b/", is_dir=True) == "gitignore"


def test_matcher_answers_outside_root_for_dot_dot_paths(tmp_path: Path) -> None:
    make(tmp_path, {"repo/a.py": "x", "b.py": "x"})
    m = IgnoreMatcher(tmp_path / "repo")
    assert isinstance(m.check("a.py"), Candidate)
    assert m.is_ignored("../b.py") == "outside_root"
    assert m.check("sub/../../b.py") == "outside_root"


# ---- content ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("rel", "data", "reason"), [
    ("a.py", b"", "empty"),
    ("a.dat", b"abc\0def", "binary"),
    ("a.dat", bytes(range(1, 32)) * 40, "binary"),
    ("a.dat", os.urandom(4096).replace(b"\0", b"\1"), "binary"),
    ("a.txt", "naïve café ✓\n".encode() * 50 + b"\xff\xfe odd\n", None),
    ("a.txt", "café au lait\n".encode("latin-1") * 20, None),
    ("deploy_key", b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH", "secret"),
    ("k.txt", b"\n-----BEGIN RSA PRIVATE KEY-----\nMIIE\n", "secret"),
    ("pgp.txt", b"-----BEGIN PGP PRIVATE KEY BLOCK-----\n", "secret"),
    ("cert.crt", b"-----BEGIN CERTIFICATE-----\nMIIB\n", None),
    (".npmrc", b"registry=https://r.example\n//r.example/:_authToken=npm_abc123\n", "secret"),
    ("web/.npmrc", b"_auth = dXNlcjpwYXNz\n", "secret"),
    (".npmrc", b"//registry.npmjs.org/:_authToken=${NPM_TOKEN}\n", None),
    (".npmrc", b"save-exact=true\n", None),
    (".yarnrc.yml", b"npmScopes:\n  acme:\n    npmAuthToken: \"abc\"\n", "secret"),
    ("x.go", b"// Code generated by protoc-gen-go. DO NOT EDIT.\npackage x\n", "generated"),
    ("x.py", b"# -*- coding: utf-8 -*-\n# Generated by the protocol buffer compiler.  DO NOT "
     b"EDIT!\n", "generated"),
    ("x.js", b"/**\n * @generated SignedSource<<abc>>\n */\nexport {}\n", "generated"),
    ("X.cs", b"// <auto-generated>\n//   by a tool\n// </auto-generated>\n", "generated"),
    ("x.py", b'"""Handle generated files."""\n\nGENERATED = "@generated"\n', None),
    ("x.py", b"import os\n" * 20 + b"# DO NOT EDIT below this line\n", None),
    ("app.js", b"var a=1;" * 400, "minified"),
    ("app.css", b"/* hdr */\n" + b".a{color:red}" * 200, "minified"),
    ("app.js", b"module.exports = require('./x');\n", None),
    ("data.json", b"[" + b"1," * 2000 + b"1]", None),
    ("main.py", b"def f():\n    return 1\n" * 100, None),
])
def test_check_content(rel: str, data: bytes, reason: str | None) -> None:
    assert check_content(rel, data) == reason

