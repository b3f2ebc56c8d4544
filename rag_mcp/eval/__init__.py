"""Retrieval evaluation: question sets, metrics and the evaluation run behind ``rag-eval``."""
