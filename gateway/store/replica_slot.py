"""A serving process's identity, stable across its restarts with no configuration.

Each process that books reservations tags their ids with its identity so that, when it is
started again after a crash (SIGKILL, an OOM kill, a host reboot), it can release what its
previous run left open instead of waiting for the reservation TTL (gateway/store/reclaim.py).

The identity is a *slot*: a lock file ``replica-<k>.lock`` in a local directory (the spool
directory, which a deployment keeps across restarts), held with an exclusive ``flock`` for
as long as the process lives. The kernel releases the lock when the process dies, however
it dies, so a starting process takes the lowest free slot and knows that whoever held it
before is gone: every open reservation tagged with that slot was booked by a dead process.
Two replicas on one host sharing a directory, or the workers of ``serve --workers N``
(a supervisor's restarted worker included), take different slots. The slot's name joins
the directory's random id (``replica-id``, written once), or ``replica_id`` when one is
configured, so two hosts or containers never share a name even when their directories have
the same path. A container without a persistent spool directory starts with a new id each
time: its previous run's reservations are then released by the TTL, as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

ID_FILE = "replica-id"
MAX_SLOTS = 1024


@dataclass
class ReplicaSlot:
    """A held slot: ``name`` is this process's identity until ``release()`` or its death."""

    name: str
    path: Path
    _file: IO[bytes]

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self._file.close()


def directory_id(directory: Path) -> str:
    """The directory's random id, created once (atomically: concurrent starters agree)."""
    target = directory / ID_FILE
    with contextlib.suppress(FileNotFoundError):
        existing = target.read_text().strip()
        if existing:
            return existing
    tmp = directory / f".{ID_FILE}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.write_text(uuid.uuid4().hex + "\n")
    try:
        os.link(tmp, target)  # fails if another starter got there first
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return target.read_text().strip()


def claim_slot(directory: str | Path, configured_id: str | None = None) -> ReplicaSlot | None:
    """The lowest free slot in ``directory``, held until this process dies; None (said in
    a warning) when the directory cannot be used, and then only the TTL releases what a
    crash leaves open."""
    where = Path(directory)
    try:
        where.mkdir(parents=True, exist_ok=True)
        base = configured_id or directory_id(where)
        for k in range(MAX_SLOTS):
            path = where / f"replica-{k}.lock"
            f = open(path, "ab")  # noqa: SIM115 - held open for the process's life
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue  # a live process holds it
            return ReplicaSlot(base if k == 0 else f"{base}#{k}", path, f)
    except OSError as exc:
        log.warning("no replica identity in %s (%s): reservations a crash leaves open are "
                    "released after the reservation TTL only", where, exc)
        return None
    log.warning("all %d replica slots in %s are held; reservations a crash leaves open are "
                "released after the reservation TTL only", MAX_SLOTS, where)
    return None
