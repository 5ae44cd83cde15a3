"""``python -m bench.serving.scale_sim``: budget leases past this machine (issue 49.4).

A discrete-time model (1 ms steps) of R replicas (default 16) each offered ``rate`` requests/s
(default 1,000, Poisson) of one tenant, against one database row whose writes are serialised:
each write occupies the row for ``write_ms`` (default: this machine's measured 1 / 1,804
reserve+settle pairs per second / 2 = 0.28 ms, issue 49). A request holds $0.002 and is
charged $0.0015 at once (an upstream that answers at once, as bench/serving/scale.py).

- baseline: each request is two writes on the row (reserve, settle); a request waits for its
  reserve write.
- leases (gateway/store/leases.py's rule): a replica's lease holds n = ⌈rate · max_age_s⌉
  requests (at most ``max_requests``, and ``max_room_share`` of the free room when that is
  smaller); it takes requests for ``max_age_s``, then is given back (one write) and a new one
  booked (one write); requests arriving while a replica's booking is in the row's queue wait
  for it. A lease the budget cannot pay for at that size falls back to one request's own
  reservation (two writes), as the code does. (L1) is checked at every booking: the
  database books only what fits, so overspend is 0 unless the model is wrong; it is printed.

Printed per ``max_age_s`` (the setting that trades lease size against how late a lowered
budget is seen): offered and admitted requests/s, writes per request, the row's utilisation,
p99 wait, and with a small budget the burst share of the hard bound's ceiling and the
overspend. The last line is the default setting's, in bench/serving/scale.py's names.
"""

from __future__ import annotations

import argparse
import math
import random
from collections import deque
from dataclasses import dataclass

HOLD, CHARGE = 0.002, 0.0015
WRITE_MS = 1000.0 / 1804 / 2  # measured: 1,804 reserve+settle pairs/s on one connection


@dataclass
class Result:
    admitted: int
    offered: int
    writes: int
    busy_ms: float
    waits_ms: list[float]
    spent: float
    seconds: float

    @property
    def p99_wait_ms(self) -> float:
        if not self.waits_ms:
            return 0.0
        w = sorted(self.waits_ms)
        return w[min(len(w) - 1, int(0.99 * len(w)))]


def simulate(replicas: int, rate: float, seconds: float, write_ms: float, *,
             leases: bool, max_age_s: float = 2.0, max_requests: int = 1000,
             room_share: float = 0.25, budget: float = 1e9, seed: int = 0) -> Result:
    rnd = random.Random(seed)
    steps = int(seconds * 1000)
    row_free_at = 0.0  # ms: when the row's write queue is empty
    spent = booked = 0.0  # settled spend; open leases and reservations (L1: spent + booked)
    writes = admitted = offered = 0
    waits: list[float] = []
    busy = 0.0
    lease_free = [0.0] * replicas
    lease_opened = [-1e9] * replicas
    lease_ready = [0.0] * replicas  # when the booking in the row's queue completes
    lease_size = [0.0] * replicas
    pending: list[deque[float]] = [deque() for _ in range(replicas)]
    per_ms = rate / 1000.0

    def write(now: float) -> float:
        nonlocal row_free_at, writes, busy
        start = max(now, row_free_at)
        row_free_at = start + write_ms
        writes += 1
        busy += write_ms
        return row_free_at

    for t in range(steps):
        now = float(t)
        for r in range(replicas):
            k = _poisson(rnd, per_ms)
            offered += k
            pending[r].extend([now] * k)
            while pending[r]:
                if not leases:
                    if row_free_at > now + 1:
                        break  # the row is busy past this millisecond: the request waits
                    if spent + booked + HOLD > budget + 1e-12:
                        pending[r].clear()  # refused: the budget is spent
                        break
                    arrived = pending[r].popleft()
                    done = write(now)  # reserve (the request waits for it), then settle
                    write(done)
                    waits.append(done - arrived)
                    spent += CHARGE
                    admitted += 1
                    continue
                if lease_ready[r] > now:
                    break  # its booking is still in the row's queue
                if lease_free[r] >= HOLD and now - lease_opened[r] < max_age_s * 1000:
                    arrived = pending[r].popleft()
                    lease_free[r] -= HOLD
                    spent += CHARGE  # settled at once: charged, the rest free again
                    booked -= CHARGE
                    lease_free[r] += HOLD - CHARGE
                    waits.append(now - arrived)
                    admitted += 1
                    continue
                if lease_size[r] > 0:  # give the old lease back (with its charges)
                    write(now)
                    booked -= lease_free[r]
                    lease_free[r] = lease_size[r] = 0.0
                room = budget - spent - booked
                n = min(max_requests, max(1, math.ceil(rate * max_age_s)))
                size = min(n * HOLD, room_share * room) if n * HOLD > room else n * HOLD
                if size < 2 * HOLD:  # one request's own reservation, as the code does
                    if row_free_at > now + 1:
                        break
                    if room < HOLD:
                        pending[r].clear()
                        break
                    arrived = pending[r].popleft()
                    done = write(now)
                    write(done)
                    waits.append(done - arrived)
                    spent += CHARGE
                    admitted += 1
                    continue
                lease_ready[r] = write(now)
                booked += size
                lease_free[r] = lease_size[r] = size
                lease_opened[r] = lease_ready[r]
                break
    return Result(admitted, offered, writes, busy, waits, spent, seconds)


def _poisson(rnd: random.Random, lam: float) -> int:
    """Knuth's method: fine for the small means of one millisecond."""
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rnd.random()
        if p <= limit:
            return k
        k += 1


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--replicas", type=int, default=16)
    p.add_argument("--rate", type=float, default=1000.0, help="requests/s per replica")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--write-ms", type=float, default=WRITE_MS)
    a = p.parse_args(argv)
    base = simulate(a.replicas, a.rate, a.seconds, a.write_ms, leases=False)
    print(f"{a.replicas} replicas x {a.rate:g} req/s, one tenant, {a.write_ms:.3f} ms per "
          f"write on its row")
    print(f"baseline (one row per request): admitted {base.admitted / a.seconds:,.0f}/s of "
          f"{base.offered / a.seconds:,.0f}/s offered, p99 wait {base.p99_wait_ms:,.0f} ms, "
          f"row busy {base.busy_ms / (a.seconds * 1000):.0%}")
    burst_budget = 0.5 * a.replicas
    ceiling = int((burst_budget - HOLD) / CHARGE + 1e-9) + 1
    last = None
    for age in (0.25, 0.5, 1.0, 2.0, 5.0):
        run = simulate(a.replicas, a.rate, a.seconds, a.write_ms, leases=True, max_age_s=age)
        burst = simulate(a.replicas, a.rate, a.seconds, a.write_ms, leases=True,
                         max_age_s=age, budget=burst_budget)
        print(f"max_age_s={age:<5g} lease={min(1000, math.ceil(a.rate * age))} requests: "
              f"admitted {run.admitted / a.seconds:,.0f}/s, writes/request "
              f"{run.writes / max(run.admitted, 1):.4f}, row busy "
              f"{run.busy_ms / (a.seconds * 1000):.1%}, p99 wait {run.p99_wait_ms:.1f} ms; "
              f"burst on ${burst_budget:g}: {burst.admitted}/{ceiling} of the ceiling, "
              f"overspend ${max(0.0, burst.spent - burst_budget):.6f}")
        if age == 2.0:
            last = (run, burst)
    assert last is not None
    run, burst = last
    print(f"admissions_per_s={run.admitted / a.seconds:.0f} "
          f"baseline_admissions_per_s={base.admitted / a.seconds:.0f} "
          f"ledger_writes_per_request={run.writes / max(run.admitted, 1):.4f} "
          f"overspend_usd={max(0.0, burst.spent - burst_budget):.6f} "
          f"burst_share_of_ceiling={burst.admitted / ceiling:.3f}")


if __name__ == "__main__":
    main()
