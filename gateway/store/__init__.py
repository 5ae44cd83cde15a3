"""The database side of the gateway: schema, budget ledger, API-key auth, request log.

The HTTP side uses `Store` (see docs/architecture.md for the seam) and these records and
errors; everything else in this package is its implementation.
"""

from gateway.store.engine import DEFAULT_DATABASE_URL, database_url_from_env, make_engine
from gateway.store.errors import BudgetExceeded, Conflict, NotFound, StoreError, StoreUnavailable
from gateway.store.logwriter import LogWriter
from gateway.store.records import KeyInfo, NewKey, Reservation, SettleResult, Tenant, TenantInfo
from gateway.store.store import Store, open_store

__all__ = [
    "DEFAULT_DATABASE_URL", "BudgetExceeded", "Conflict", "KeyInfo", "LogWriter", "NewKey",
    "NotFound", "Reservation", "SettleResult", "Store", "StoreError", "StoreUnavailable",
    "Tenant", "TenantInfo", "database_url_from_env", "make_engine", "open_store",
]
