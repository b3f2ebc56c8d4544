"""Answering a query: retrieval, fusion, joining, reranking, span reading, redaction and the
query service the tools call."""
