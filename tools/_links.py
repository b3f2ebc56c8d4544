"""Citable web links for spans (the ``url`` of ``search`` and ``fetch``): ChatGPT turns them into
citation links, and a ``file://`` link on the user's machine opens nothing there.

``http.url_template`` says how: ``"auto"`` (the default) derives a forge permalink from the
repository's ``origin`` remote and its HEAD commit; a template with ``{commit}``, ``{path}``,
``{start}`` and ``{end}`` is used as given (``{commit}`` from HEAD); ``""`` sends no link. Without
a link (no remote, an unknown forge, not a git checkout) ``url`` is empty rather than wrong.
"""

from __future__ import annotations

import re
import subprocess
import time
from functools import lru_cache
from urllib.parse import quote

#: permalink templates of the forges a remote can be recognised on, by host
FORGES = {
    "github.com": "https://{host}/{repo}/blob/{{commit}}/{{path}}#L{{start}}-L{{end}}",
    "gitlab.com": "https://{host}/{repo}/-/blob/{{commit}}/{{path}}#L{{start}}-{{end}}",
    "bitbucket.org": "https://{host}/{repo}/src/{{commit}}/{{path}}#lines-{{start}}:{{end}}",
    "codeberg.org": "https://{host}/{repo}/src/commit/{{commit}}/{{path}}#L{{start}}-L{{end}}",
}
#: how long a HEAD commit read from git is reused (a commit made meanwhile shows up after it)
COMMIT_SECONDS = 5.0
_REMOTE = re.compile(
    r"^(?:(?:https?|ssh|git)://(?:[^@/]+@)?(?P<host>[^/:]+)(?::\d+)?/"
    r"|(?:[^@/]+@)?(?P<scp_host>[^/:]+):)(?P<repo>[^\s]+?)(?:\.git)?/?$")


def _git(root: str, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True,
                              timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):  # no git, or a hung filesystem
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def forge_template(remote: str) -> str | None:
    """The permalink template of a remote URL on a known forge (credentials dropped), or None:
    ``git@github.com:org/repo.git`` -> ``https://github.com/org/repo/blob/{commit}/...``."""
    m = _REMOTE.match(remote.strip())
    if m is None:
        return None
    host = (m.group("host") or m.group("scp_host") or "").lower()
    repo = m.group("repo").strip("/")
    if host not in FORGES or repo.count("/") < 1 or ".." in repo.split("/"):
        return None
    return FORGES[host].format(host=host, repo=repo)


@lru_cache(maxsize=64)
def _remote_template(root: str) -> str | None:
    remote = _git(root, "config", "--get", "remote.origin.url")
    return forge_template(remote) if remote else None


_commits: dict[str, tuple[float, str | None]] = {}


def _head(root: str, clock: float) -> str | None:
    at, commit = _commits.get(root, (float("-inf"), None))
    if clock - at > COMMIT_SECONDS:
        commit = _git(root, "rev-parse", "--verify", "HEAD")
        _commits[root] = (clock, commit)
    return commit


def span_url(setting: str, root: str, path: str, start: int, end: int) -> str:
    """The citable URL of lines ``start``-``end`` of ``path`` in the repository at ``root``, by
    the ``http.url_template`` ``setting``; "" when there is none to give."""
    template = _remote_template(root) if setting == "auto" else setting
    if not template:
        return ""
    commit = _head(root, time.monotonic()) if "{commit}" in template else ""
    if commit is None:
        return ""
    return (template.replace("{commit}", commit).replace("{path}", quote(path))
            .replace("{start}", str(start)).replace("{end}", str(end)))
