"""Real parts for the reliability tests: a TCP proxy that simulates a database outage,
`tollgate serve` replicas as separate processes, and the schemathesis fuzz.

They ship in ``bench.serving.cluster`` because the reliability benches run on them too; tests
import them from here.
"""

from bench.serving.cluster import (
    PG_ADMIN_URL,
    REDIS_URL,
    Cluster,
    Replica,
    TcpProxy,
    free_port,
    pg_database,
    redis_cleanup,
    run_fuzz,
    via_proxy,
)

__all__ = ["PG_ADMIN_URL", "REDIS_URL", "Cluster", "Replica", "TcpProxy", "free_port",
           "pg_database", "redis_cleanup", "run_fuzz", "via_proxy"]
