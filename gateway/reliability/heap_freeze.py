"""The startup heap moved out of the garbage collector's reach once a serving process is up.

Why: a full (generation 2) collection walks every container object the process holds, with
the GIL held throughout, in whichever thread's allocation set it off. A serving process
holds millions of them from startup alone (litellm's model map and lazy imports, the
router, the encoder's modules: ~870 MB resident), and one such collection took 0.4-1.4 s
(measured with a ``gc.callbacks`` timer on `python -m bench.serving.hostile --small`'s
replicas). Collections are rare (CPython runs a full one once the objects that survived
since the last one exceed a quarter of those it kept), so a long run set one off where
allocation was heaviest: the worker thread parsing a refused 15,000-tool body, which then
held /health for 540-650 ms (issue 35's tools_loop_stall_ms; 18 ms with no run before it).

``freeze_startup_heap`` collects once and then moves every object alive into the permanent
generation (``gc.freeze``: "move them to a permanent generation and ignore them in all the
future collections"); later full collections walk only what the process made since. Frozen objects are still freed when nothing refers to them;
only a reference cycle among them would never be, and the startup heap is what the process
keeps until it exits. Done at the end of startup, before the loop watch starts and before
anything is served (the collection itself takes as long as one of those pauses, once).
Only ``tollgate serve`` asks for it: tests and tools that build gateways in their own
process keep the collector as it was.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Collect, then freeze every object alive; how many objects are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
