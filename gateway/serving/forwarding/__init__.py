"""Reaching a backend, or the response cache in front of it: one upstream call through litellm
and what its failure means, the attempts over a plan's candidates, the answer as the client
gets it, the SDK body, litellm's setup, the cache's store and one request's use of it.
Shared by every endpoint."""
