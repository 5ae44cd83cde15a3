"""POST /v1/chat/completions: its handler, the story every planned endpoint follows (the chat
body, ``ChatRequest``, is in request/: every planned endpoint is viewed as one)."""
