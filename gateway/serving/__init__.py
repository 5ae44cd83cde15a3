"""The serving side: one room per endpoint, beside the rooms every endpoint shares, ranked
(docs/architecture.md; tests/gateway/test_layers.py checks that a room imports only lower ones).

Endpoints: chat/, responses/, completions/, embeddings/, messages/ (Anthropic's), units/ (the
passthroughs billed by the unit); none imports another. Shared, from the bottom: budget/ (what
it may cost and holds), request/ (the body as every endpoint reads it), plan/ (how a request
will be served, a named backend found), forwarding/ (upstream calls, attempts, the response
cache), record/ (its outcome, the one record of every endpoint, log row and access line). At
the top level, what no single room owns: tracing.py (the request's spans),
response_headers.py, the one frame of every endpoint (endpoint.py for a refusal, delivery.py
for an answer, named_call.py for the one call of embeddings and the unit endpoints,
body_limit.py), the route table more_routes.py and GET /v1/models."""
