"""The index on disk: spans and their IDs, the catalog, the lexical and vector stores, generations,
and the handle a reader opens a published generation with."""
