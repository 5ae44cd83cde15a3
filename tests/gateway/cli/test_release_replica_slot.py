"""`serve --workers N`: the process that only checked the config lets its store's replica
slot go (gateway/cli/serve.py ``release_replica_slot``), so the first worker takes that slot
and the name it carries. The app's store is guarded (build_context wraps every store); the
slot is its inner store's, reached through the types, not probed for."""

from __future__ import annotations

from pathlib import Path

from gateway.cli.serve import release_replica_slot
from gateway.config import ReliabilitySettings
from gateway.reliability.guards import guard_store
from gateway.store import Store
from gateway.store.replica_slot import claim_slot


def test_the_guarded_stores_slot_is_let_go(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    store = Store.from_url(f"sqlite:///{tmp_path / 'tollgate.db'}", replica_dir=str(spool))
    held = store.replica_slot
    assert held is not None
    guarded = guard_store(store, ReliabilitySettings(spool_dir=str(spool)))
    assert guarded is not None and guarded.inner is store
    assert claim_slot(spool).name == f"{held.name}#1"  # held: the next starter gets another

    release_replica_slot(guarded)
    again = claim_slot(spool)
    assert again is not None and again.name == held.name  # the first worker takes it
    store.engine.dispose()
