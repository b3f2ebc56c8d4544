"""The MCP edge and the composition root: the only package that imports ``mcp``, ``tools`` and
the watcher."""
