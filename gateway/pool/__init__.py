"""The pool the gateway routes over (backends, routes, prices, router, how each backend is
known), one immutable value swapped whole: ``pool.py``. How the router knows a backend:
``known.py``; cold-start priors: ``priors.py``; a prior backend's traffic cap per route:
``explore_share.py``; backends adopted from a router artifact: ``adopt.py``."""

from gateway.pool.pool import Pool, PoolHolder, build_pool

__all__ = ["Pool", "PoolHolder", "build_pool"]
