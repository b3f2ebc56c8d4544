"""What a candidate's path tells the ranking stage (``search.rank``): the words of a file's name
and folder and which of a query's words name it, and the file a partial file or a test is part
of (``SqlMapper.Async.cs`` of ``SqlMapper.cs``, ``completions_test.go`` of ``completions.go``).
Plain functions of paths and words: none knows a repository or a language."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from rag_mcp.index.lexical import split_identifier
from rag_mcp.index.spans import is_test_file

#: a query word that names more than this share of the pool's files tells none of them apart
#: (``schema`` in a schema library's ``schemas.ts`` files): it earns no path credit
COMMON_PATH = 0.5


def stem(path: str) -> str:
    """A file's name without its last suffix (``SqlMapper.Async.cs`` -> ``SqlMapper.Async``)."""
    name = path.rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0] if "." in name[1:] else name


def base_file(path: str) -> str:
    """``a/SqlMapper.Async.cs`` -> ``a/SqlMapper.cs``: the file a partial file belongs to."""
    head, _, name = path.rpartition("/")
    first, _, rest = name.partition(".")
    if not first or not rest:
        return path
    base = f"{first}.{rest.rpartition('.')[2]}"
    return f"{head}/{base}" if head else base


def subjects(path: str, pool: Iterable[str]) -> list[str]:
    """The ``pool`` files ``path`` is part of: a partial file's base file (``SqlMapper.Async.cs``,
    ``router.test.ts`` -> ``SqlMapper.cs``, ``router.ts``), or the files a test is named after
    (``completions_test.go``, ``test_app.py``, ``RouterTest.java`` -> ``completions.go``,
    ``app.py``, ``Router.java``, in any folder: what is left of the name is one test word)."""
    base = base_file(path)
    if base != path or not is_test_file(path):
        return [base] if base != path and base in pool else []
    name, ext = stem(path).casefold(), path.rpartition(".")[2]
    return [p for p in pool if p != path and p.endswith("." + ext) and not is_test_file(p)
            and (s := stem(p).casefold()) in name and is_test_file(rest := name.replace(s, "", 1))
            and len(split_identifier(rest)) == 1]


@functools.lru_cache(maxsize=65_536)
def path_words(path: str) -> frozenset[str]:
    """Words of a file's name and its folder's: ``middleware/request_id.go`` -> request, id,
    requestid, middleware."""
    parts = path.split("/")
    name = stem(path)
    out = set(split_identifier(re.sub(r"[-.]", "_", name)))
    out.add(re.sub(r"[-_.]", "", name.casefold()))
    if len(parts) > 1:
        out.update(split_identifier(parts[-2].replace("-", "_")))
    return frozenset(p for p in out if p)


def word_match(a: str, b: str) -> bool:
    """Two words that are the same or one a prefix of the other (route/router, serial/
    serializer), the shorter at least 3 letters, also once a plural's ``s`` is dropped
    (utils/utility, impls/implementations: 4 letters left at least), or sharing a 5-letter
    beginning."""
    if a == b:
        return True
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    if len(short) >= 3 and long_.startswith(short):
        return True
    if len(short) >= 5 and short[-1] == "s" and long_.startswith(short[:-1]):
        return True
    return len(short) >= 5 and long_[:5] == short[:5]


def names(word: str, path: str) -> bool:
    """Whether ``word`` names the file ``path`` or its folder."""
    return any(word_match(word, x) for x in path_words(path))


def path_share(path: str, words: frozenset[str]) -> float:
    """The share of ``words`` (a query's content words, or its ``telling_words``) that name the
    file or its folder."""
    return sum(names(k, path) for k in words) / len(words) if words else 0.0


def telling_words(paths: set[str], words: frozenset[str]) -> frozenset[str]:
    """The ``words`` that name at most ``COMMON_PATH`` of ``paths`` (the pool's files): a word
    in most of their names is the project's own vocabulary (``schema`` in a schema library,
    ``json`` in a JSON library) and tells no file from another."""
    limit = COMMON_PATH * len(paths)
    return frozenset(k for k in words if sum(names(k, p) for p in paths) <= limit)
