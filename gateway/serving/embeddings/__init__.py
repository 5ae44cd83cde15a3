"""POST /v1/embeddings: its body, its token bound and its handler."""
