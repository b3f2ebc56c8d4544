"""Shared fixtures: every test runs offline, with its own config, logs and index folders."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["ANONYMIZED_TELEMETRY"] = "False"

HASH_MODEL = "test-hash-64"


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ONNX export per test session, outside the user's own cache."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model_cache: Path) -> None:
    for key in list(os.environ):
        if key.startswith("RAG_") or key == "OLLAMA_HOST":
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RAG_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("RAG_MODEL_CACHE", str(model_cache))


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[[dict[str, str]], Path]:
    """Write a small repository: ``{"src/a.py": "..."}`` -> its root folder."""

    def make(files: dict[str, str], name: str = "repo") -> Path:
        root = tmp_path / name
        for rel, text in files.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(textwrap.dedent(text), encoding="utf-8")
        root.mkdir(exist_ok=True)
        return root

    return make


SAMPLE_REPO = {
    "src/app/spans.py": '''
        """Span IDs for the demo app."""

        import hashlib


        def parse_span_id(span_id: str) -> tuple[str, int, int]:
            """Split a span ID into its path and line range."""
            path, rng, _digest = span_id.rsplit(":", 2)
            start, end = rng.split("-")
            return path, int(start), int(end)


        class HTTPError(Exception):
            """Raised when the remote server answers with an error status."""

            def __init__(self, status: int, body: str) -> None:
                super().__init__(f"HTTP {status}")
                self.status = status
                self.body = body


        def checksum(data: bytes) -> str:
            """Hex sha256 of some bytes."""
            return hashlib.sha256(data).hexdigest()
        ''',
    "src/app/retry.py": '''
        import time


        def retry(fn, attempts=3, delay=0.5):
            """Call fn until it succeeds, sleeping with exponential backoff between tries."""
            for i in range(attempts):
                try:
                    return fn()
                except OSError:
                    time.sleep(delay * 2 ** i)
            return fn()
        ''',
    "web/client.ts": '''
        export class ApiClient {
          constructor(private baseUrl: string) {}

          async fetchUser(id: number): Promise<User> {
            const res = await fetch(`${this.baseUrl}/users/${id}`);
            return res.json();
          }
        }

        export interface User {
          id: number;
          name: string;
        }
        ''',
    "docs/install.md": '''
        # Installing the demo

        Some intro text about the demo application.

        ## Linux

        ### Debian

        Run `apt install demo` and then start the service with systemctl.

        ## Windows

        Download the installer and double-click it.
        ''',
    "README.txt": '''
        The demo application shows how spans are cut.

        It has a small Python package and a TypeScript client.
        ''',
}


@pytest.fixture
def sample_repo(make_repo: Callable[..., Path]) -> Path:
    return make_repo(SAMPLE_REPO)
