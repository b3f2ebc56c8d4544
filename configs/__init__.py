"""Packaged configuration: default.toml and the client configuration templates."""

from __future__ import annotations

from importlib import resources


def read_text(name: str) -> str:
    """Text of a file shipped in this package (``default.toml``, a client template, ...)."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
