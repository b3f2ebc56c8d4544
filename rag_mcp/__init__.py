"""rag-mcp: small, exact context from a repository for coding assistants, over MCP."""

__version__ = "0.1.0"
