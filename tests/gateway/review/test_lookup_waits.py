"""A routing lookup past its key's slots is refused after its retry-after, so a loop that
polls on refusals cannot turn them into a flood of cheap requests (issue 48, item 7; the
hostile bench's routing_poll_neighbour_p50_ratio measures the effect through HTTP). The
sleep is injected to record the waits instead of timing them."""

from __future__ import annotations

import anyio
import pytest

from gateway.auth import Principal
from gateway.errors import GatewayError
from gateway.review.explain import REFUSAL_DELAY_S, Waits

KEY = Principal(admin=False, tenant_id="t", key_id="k")


def test_a_refusal_waits_its_retry_after_and_holds_no_slot() -> None:
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    waits = Waits(limit=1, sleep=sleep)

    async def main() -> None:
        async with waits.slot(KEY):
            with pytest.raises(GatewayError) as refused:
                async with waits.slot(KEY):
                    pass
            assert refused.value.status == 429
            assert refused.value.headers["retry-after"] == "1"
        async with waits.slot(KEY):  # the refusal held nothing: the slot is free again
            pass

    anyio.run(main)
    assert slept == [REFUSAL_DELAY_S]


def test_past_max_delayed_refusals_are_answered_at_once() -> None:
    release = anyio.Event()
    started = []

    async def sleep(s: float) -> None:
        started.append(s)
        await release.wait()

    waits = Waits(limit=1, max_delayed=2, sleep=sleep)
    codes: list[int] = []

    async def refused() -> None:
        try:
            async with waits.slot(KEY):
                pass
        except GatewayError as e:
            codes.append(e.status)

    async def main() -> None:
        async with waits.slot(KEY), anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(refused)
            await anyio.wait_all_tasks_blocked()
            assert len(started) == 2 and codes == []  # two refusals wait out their delay
            await refused()  # the third is answered at once
            assert codes == [429]
            release.set()

    anyio.run(main)
    assert codes == [429, 429, 429] and len(started) == 2
