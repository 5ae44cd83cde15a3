"""How a request will be served, decided before money is held: the frozen ``Plan``, routing over
the pool, the promise rule, Φ(x) batching, fallbacks and the key's models."""
