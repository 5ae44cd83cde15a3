"""A refusal a client can loop on is sent after its retry-after (issue 48.6-7): a routing
lookup past its key's slots, an oversized count_tokens body. One mechanism,
``gateway.reliability.guards.pause_refusal``; the hostile bench's
routing_poll_neighbour_p50_ratio and count_tokens_neighbour_p50_ratio measure its effect
through HTTP. The sleep is injected to record the pauses instead of timing them."""

from __future__ import annotations

import anyio
import pytest

from gateway.auth import Principal
from gateway.errors import GatewayError
from gateway.reliability.guards import REFUSAL_PAUSE_S, pause_refusal
from gateway.review.explain import Waits

KEY = Principal(admin=False, tenant_id="t", key_id="k")


def test_a_refused_lookup_pauses_before_its_429_and_holds_no_slot() -> None:
    paused: list[int] = []

    async def pause() -> None:
        paused.append(1)

    waits = Waits(limit=1)

    async def main() -> None:
        async with waits.slot(KEY, pause):
            with pytest.raises(GatewayError) as refused:
                async with waits.slot(KEY, pause):
                    pass
            assert refused.value.status == 429
            assert refused.value.headers["retry-after"] == "1"
        async with waits.slot(KEY, pause):  # the refusal held nothing: the slot is free again
            pass

    anyio.run(main)
    assert paused == [1]  # only the refusal paused


def test_past_the_limiters_total_refusals_are_not_paused() -> None:
    release = anyio.Event()
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)
        await release.wait()

    async def main() -> None:
        waits = anyio.CapacityLimiter(2)
        done: list[str] = []

        async def refusal(name: str) -> None:
            await pause_refusal(waits, sleep=sleep)
            done.append(name)

        async with anyio.create_task_group() as tg:
            tg.start_soon(refusal, "a")
            tg.start_soon(refusal, "b")
            await anyio.wait_all_tasks_blocked()
            assert slept == [REFUSAL_PAUSE_S] * 2 and done == []  # two pause
            await refusal("c")  # the limiter is full: the third is answered at once
            assert done == ["c"]
            release.set()
        assert sorted(done) == ["a", "b", "c"] and waits.available_tokens == 2

    anyio.run(main)
