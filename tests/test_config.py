from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

import configs
from rag_mcp.config import KNOBS, ConfigError, Settings, defaults, load_settings
from rag_mcp.serve.guard import is_loopback


def test_every_knob_has_a_default_and_every_default_a_knob() -> None:
    d = defaults()
    assert set(d) == {k.attr for k in KNOBS} == {f.name for f in fields(Settings)}
    text = configs.read_text("default.toml")
    for k in KNOBS:  # each knob documents its environment variable
        assert k.env in text, k.env


def test_the_knob_table_is_read_from_the_settings_fields() -> None:
    by_attr = {k.attr: k for k in KNOBS}
    assert [k.attr for k in KNOBS] == [f.name for f in fields(Settings)]
    assert (by_attr["roots"].type, by_attr["ignore"].type) == ("paths", "list")
    assert (by_attr["tau"].type, by_attr["rerank"].type, by_attr["cache_ttl"].type) == (
        "tau", "bool", "float")
    assert by_attr["embed_backend"].type == "choice"
    assert (by_attr["k"].key, by_attr["k"].env, by_attr["k"].flag) == ("query.k", "RAG_K", "--k")
    assert by_attr["http_token"].secret and not by_attr["http_port"].secret


def _cli_help(capsys: pytest.CaptureFixture[str]) -> str:
    from indexers import cli, eval_cli
    from rag_mcp.serve import __main__ as serve_main

    calls = [(cli.main, []), (eval_cli.main, []),
             *((serve_main.main, [c]) for c in ("serve", "ask", "config"))]
    for main, args in calls:
        with pytest.raises(SystemExit):
            main([*args, "--help"])
    return capsys.readouterr().out


def test_every_flag_a_knob_or_default_toml_names_exists(capsys) -> None:
    """An error message or a comment that names a flag names one a command accepts."""
    accepted = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", _cli_help(capsys)))
    assert {"--root", "--chunk-chars", "--port", "--k"} <= accepted  # the help was read
    named = {k.flag for k in KNOBS if k.flag}
    documented = set(re.findall(r"flag (--[a-z][a-z0-9-]*)", configs.read_text("default.toml")))
    assert named == documented
    assert named <= accepted, sorted(named - accepted)


def test_precedence_default_file_env_flag(tmp_path: Path) -> None:
    cfg = tmp_path / "rag.toml"
    cfg.write_text("[query]\nk = 7\nmax_bytes = 4096\n[index]\nchunk_chars = 900\n")
    s = load_settings(config_file=cfg, environ={"RAG_K": "9"}, cwd=tmp_path)
    assert (s.k, s.max_bytes, s.chunk_chars) == (9, 4096, 900)
    s = load_settings({"k": "11"}, config_file=cfg, environ={"RAG_K": "9"}, cwd=tmp_path)
    assert s.k == 11
    assert load_settings(environ={}, cwd=tmp_path).k == 5


def test_invalid_value_names_key_env_and_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as ei:
        load_settings(environ={"RAG_CHUNK_CHARS": "10"}, cwd=tmp_path)
    msg = ei.value.message
    assert "index.chunk_chars" in msg and "RAG_CHUNK_CHARS" in msg and "--chunk-chars" in msg
    with pytest.raises(ConfigError) as ei:  # a knob without a flag names none
        load_settings(environ={"RAG_MAX_SPANS_PER_ANSWER": "0"}, cwd=tmp_path)
    assert ei.value.message == ("invalid value '0' for query.max_spans (env "
                                "RAG_MAX_SPANS_PER_ANSWER): must be between 1 and 20")
    with pytest.raises(ConfigError, match="must be one of onnx, onnx-int8, torch"):
        load_settings({"embed_backend": "gpu"}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="RAG_EMBED_MAX_TOKENS.*0 .the model's window. or at "
                                          "least 16"):
        load_settings(environ={"RAG_EMBED_MAX_TOKENS": "8"}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="true or false"):
        load_settings(environ={"RAG_LOCAL_LLM": "maybe"}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="unknown key query.nope"):
        cfg = tmp_path / "bad.toml"
        cfg.write_text("[query]\nnope = 1\n")
        load_settings(config_file=cfg, cwd=tmp_path)


def test_a_refusal_never_echoes_a_secret(tmp_path: Path) -> None:
    s = load_settings(environ={"RAG_HTTP_TOKEN": "s3cr3t-token-value"}, cwd=tmp_path)
    assert s.http_token == "s3cr3t-token-value"
    with pytest.raises(ConfigError) as ei:
        load_settings(environ={"RAG_CHROMA_TOKEN": "x", "RAG_HTTP_PORT": "99999"}, cwd=tmp_path)
    assert "x" not in ei.value.message.split("'")


def test_tau_auto_and_numbers(tmp_path: Path) -> None:
    assert load_settings(cwd=tmp_path).tau is None
    assert load_settings(environ={"RAG_TAU": "0.4"}, cwd=tmp_path).tau == pytest.approx(0.4)
    with pytest.raises(ConfigError):
        load_settings(environ={"RAG_TAU": "1.5"}, cwd=tmp_path)


def test_root_defaults_to_git_root(tmp_path: Path) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    sub = tmp_path / "repo" / "a" / "b"
    sub.mkdir(parents=True)
    assert load_settings(cwd=sub).root == str((tmp_path / "repo").resolve())
    with pytest.raises(ConfigError, match="not a directory"):
        load_settings({"root": str(tmp_path / "missing")}, cwd=tmp_path)


def test_index_path_is_per_repository(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    sa, sb = load_settings({"root": str(a)}), load_settings({"root": str(b)})
    assert sa.index_path.parent == a / ".rag"
    assert sa.collection_name != sb.collection_name


@pytest.mark.parametrize("host,expected", [
    ("127.0.0.1", True), ("::1", True), ("localhost", True), ("127.5.0.1", True),
    ("0.0.0.0", False), ("192.168.1.5", False), ("example.com", False), ("[::1]", True),
])
def test_is_loopback(host: str, expected: bool) -> None:
    assert is_loopback(host) is expected
