"""A serving process's identity without configuration (gateway/store/replica_slot.py): live
processes sharing a directory hold different slots, a slot freed by a dead process goes to
the next starter, which releases exactly what that process left open."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from gateway.store import Store
from gateway.store.replica_slot import claim_slot
from tests.gateway.store.conftest import FakeClock, started

pytestmark = pytest.mark.anyio


def test_live_processes_hold_different_slots_and_a_dead_ones_slot_is_reused(
        tmp_path: Path) -> None:
    """Slots are flocks: a slot held by another process is skipped; a process that died
    (here: exited without releasing anything) frees its slot, under the same name."""
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import sys, time\n"
         "from gateway.store.replica_slot import claim_slot\n"
         f"s = claim_slot({str(tmp_path)!r}); print(s.name, flush=True); time.sleep(600)")],
        stdout=subprocess.PIPE, text=True)
    try:
        theirs = holder.stdout.readline().strip()
        mine = claim_slot(tmp_path)
        assert mine is not None and mine.name != theirs
        assert mine.name == f"{theirs}#1"  # the directory's one id, another slot
    finally:
        holder.kill()
        holder.wait()
    again = claim_slot(tmp_path)
    assert again is not None and again.name == theirs  # the dead process's slot
    assert claim_slot(tmp_path / "elsewhere").name not in (theirs, mine.name)


async def test_a_restarted_process_releases_only_what_its_dead_slot_left_open(
        db_url: str, clock: FakeClock, tmp_path: Path) -> None:
    """Two processes on one directory with no replica_id (as `serve --workers 2`): one dies
    holding a reservation; the process that starts in its place releases that one at start,
    and the live sibling's reservation stays held and settles."""
    spool = str(tmp_path / "spool")
    async with started(db_url, clock=clock, replica_dir=spool) as a, started(
            db_url, clock=clock, replica_dir=spool, auto_upgrade=False) as b:
        _, key = await a.create_tenant("acme", budget_usd=1.0)
        tenant = await a.authenticate(key.api_key)
        dying = Store.from_url(db_url, clock=clock, replica_dir=spool)
        await dying.start()
        await dying.reserve(tenant, 0.004, "left-open")
        live = await b.reserve(tenant, 0.001, "live-on-b")
        await dying.close()  # its reservation stays open; its slot is let go, as at death
        clock.now += timedelta(seconds=5)
        async with started(db_url, clock=clock, replica_dir=spool,
                           auto_upgrade=False) as again:
            assert again.replica_slot.name == dying.replica_slot.name
            info = await again.get_tenant(tenant.id)
            assert info.reserved_usd == pytest.approx(0.001)  # b's stays held
            assert info.spent_usd == 0.0  # nothing shows the upstream was called
            assert (await b.settle(live, 0.0005)).applied
