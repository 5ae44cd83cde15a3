"""POST /v1/responses (OpenAI's Responses API): its body, its chat view and its handler."""
