"""The serving side: one room per endpoint, beside the rooms every endpoint shares.

Endpoints: chat/, responses/, completions/, embeddings/, messages/ (Anthropic's), units/ (the
passthroughs billed by the unit). Shared: plan/ (how a request will be served), budget/ (what it
may cost and holds), record/ (its outcome, log row, access line and spans), forwarding/
(upstream calls, attempts, the response cache). At the top level, what frames every
endpoint: endpoint.py, validation.py, response_headers.py, passthrough.py (the record embeddings
and the unit-billed endpoints share), the route table more_routes.py and GET /v1/models
(docs/architecture.md draws it)."""
