"""The error contract: every failure a user or a client can see carries a stable code.

Messages are read by two audiences. The ``message`` goes to the MCP client (an assistant, then a
person) and to the terminal of ``rag-index``: it says what went wrong and how to fix it, in one or
two sentences, and never holds a stack trace, a secret or a path outside the repository root.
"""

from __future__ import annotations

E_INVALID_ARGUMENT = "E_INVALID_ARGUMENT"
E_NOT_FOUND = "E_NOT_FOUND"
E_STALE = "E_STALE"
E_INDEX_UNAVAILABLE = "E_INDEX_UNAVAILABLE"
E_LLM_UNAVAILABLE = "E_LLM_UNAVAILABLE"
E_INTERNAL = "E_INTERNAL"


class RagError(Exception):
    """Base of every error rag-mcp raises on purpose; ``code`` is stable, ``message`` actionable."""

    code = E_INTERNAL
    #: process exit status used by the command-line tools
    exit_code = 1

    def __init__(self, message: str, *, details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = dict(details or {})

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out


class InvalidArgument(RagError):
    """The caller sent something malformed: an ID of the wrong shape, an empty query, a bad knob."""

    code = E_INVALID_ARGUMENT
    exit_code = 2


class NotFound(RagError):
    """The thing asked for is not in the index (an unknown span ID, a path never indexed)."""

    code = E_NOT_FOUND
    exit_code = 3


class Stale(RagError):
    """The file changed since it was indexed and the span cannot be found again."""

    code = E_STALE
    exit_code = 4


class IndexUnavailable(RagError):
    """No usable index: missing, half-written, damaged, or built with another model."""

    code = E_INDEX_UNAVAILABLE
    exit_code = 5


class LLMUnavailable(RagError):
    """The local model could not answer: Ollama is down, the model is missing, or it timed out."""

    code = E_LLM_UNAVAILABLE
    exit_code = 6


class Internal(RagError):
    """A bug or an unexpected failure; the message is generic, the details go to the log only."""

    code = E_INTERNAL
    exit_code = 70


class ConfigError(InvalidArgument):
    """An invalid configuration value; the message names the key, the env var and the flag."""


class IndexBusy(RagError):
    """Another process holds the writer lock of this index."""

    code = E_INDEX_UNAVAILABLE
    exit_code = 75
