"""``python -m rag_mcp``: the ``rag-mcp`` command (rag_mcp.serve.__main__)."""

from rag_mcp.serve.__main__ import main

if __name__ == "__main__":
    raise SystemExit(main())
