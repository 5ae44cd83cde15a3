"""POST /v1/chat/completions: the chat body (``ChatRequest``, also the chat view the other endpoints
plan, reserve and log on) and its handler."""
