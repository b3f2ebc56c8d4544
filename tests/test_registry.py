"""server.json, the MCP Registry's description of rag-mcp, against the rules the registry
applies when it is published: the fields and limits of its schema (checked here field by field:
the schema itself is not available offline), the package it names being this project at this
version, and the README's ownership marker naming the same server."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from rag_mcp.serve.__main__ import build_parser

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
SERVER = json.loads((REPO / "server.json").read_text(encoding="utf-8"))
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
SCHEMA = re.compile(r"^https://static\.modelcontextprotocol\.io/schemas/\d{4}-\d{2}-\d{2}/"
                    r"server\.schema\.json$")
#: the schema's name pattern, and the reverse-DNS namespace the registry checks on top of it
NAME = re.compile(r"^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$")
LABEL = r"[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?"
NAMESPACE = re.compile(rf"^{LABEL}(\.{LABEL})+$")
TOP_KEYS = {"$schema", "name", "title", "description", "version", "packages", "remotes",
            "repository", "websiteUrl", "icons", "_meta"}
PACKAGE_KEYS = {"registryType", "registryBaseUrl", "identifier", "version", "fileSha256",
                "runtimeHint", "runtimeArguments", "packageArguments", "environmentVariables",
                "transport"}
INPUT_KEYS = {"type", "name", "value", "valueHint", "default", "description", "format",
              "isRequired", "isSecret", "isRepeated", "choices", "placeholder", "variables"}


def test_server_json_has_the_schema_fields_within_their_limits() -> None:
    assert SCHEMA.match(SERVER["$schema"])
    assert set(SERVER) <= TOP_KEYS, set(SERVER) - TOP_KEYS
    name = SERVER["name"]
    assert 3 <= len(name) <= 200 and NAME.match(name) and name.count("/") == 1
    assert NAMESPACE.match(name.split("/")[0]), "the namespace is reverse DNS (io.github.owner)"
    assert 1 <= len(SERVER["description"]) <= 100
    assert 1 <= len(SERVER["title"]) <= 100
    for package in SERVER["packages"]:
        assert set(package) <= PACKAGE_KEYS, set(package) - PACKAGE_KEYS
        assert package["registryType"] in {"npm", "pypi", "nuget", "oci", "mcpb"}
        assert package["transport"] == {"type": "stdio"}
        assert package["version"] not in {"", "latest"}
        assert not re.search(r"[\^~<>*=]|\.x$", package["version"]), "an exact version"
        for arg in [*package.get("runtimeArguments", []), *package.get("packageArguments", [])]:
            assert set(arg) <= INPUT_KEYS and arg["type"] in {"named", "positional"}
            assert arg["type"] == "positional" or arg["name"].startswith("-")
            assert arg.get("format", "string") in {"string", "number", "boolean", "filepath"}
        for var in package.get("environmentVariables", []):
            assert set(var) <= INPUT_KEYS - {"type"} and re.match(r"^[A-Z_][A-Z0-9_]*$",
                                                                   var["name"])


def test_server_json_names_this_project_at_this_version() -> None:
    assert SERVER["version"] == PROJECT["version"]
    (package,) = SERVER["packages"]
    assert package["registryType"] == "pypi"
    assert package["identifier"] == PROJECT["name"] and package["version"] == PROJECT["version"]
    # a registry client runs the package by its name (`uvx rag-mcp-local --root R`)
    assert PROJECT["scripts"][PROJECT["name"]] == PROJECT["scripts"]["rag-mcp"]
    argv = [x for a in package["packageArguments"] for x in (a["name"], "/some/repo")]
    args = build_parser().parse_args(["serve", *argv])  # what `rag-mcp --root R` runs
    assert args.root == ["/some/repo"]


def test_the_readme_carries_the_ownership_marker() -> None:
    readme = (REPO / PROJECT["readme"]).read_text(encoding="utf-8")
    markers = re.findall(r"<!--\s*mcp-name:\s*(\S+)\s*-->", readme)
    assert markers == [SERVER["name"]]


@pytest.mark.parametrize("doc", ["README.md", "docs/DEPLOY.md"])
def test_the_publishing_note_names_the_server(doc: str) -> None:
    assert SERVER["name"] in (REPO / doc).read_text(encoding="utf-8")
