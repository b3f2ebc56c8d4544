"""Embedding models: the embedder protocol, the bundled models, the ONNX runtime and its export,
the torch path, and a deterministic fake for tests."""
