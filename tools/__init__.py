"""MCP tools: one module per tool. Each is a plain function ``fn(deps, **params) -> Model`` with a
typed signature the server turns into the tool's schema; none of them imports the MCP SDK."""
