"""Run numeric work on one thread: on a shared 2-core machine, torch/OpenMP/BLAS thread
pools oversubscribe and run ~8x slower than a single thread (measured), and one thread
also keeps results bit-for-bit deterministic."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from threadpoolctl import threadpool_limits


@contextmanager
def single_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        torch.set_num_threads(before)
