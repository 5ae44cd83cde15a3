"""Live greedy answers to the probe prompts, through litellm (the black-box side of Eq. 5).

Each probe is sent once as a user message with ``temperature=0`` (greedy, as CSCR's
ŷ_h(x) is deterministic decoding). Calls run with bounded concurrency; transient failures
(rate limits, 5xx, timeouts, dropped connections) are retried with exponential backoff,
client errors (bad request, authentication) are not. Spend is tracked from each answer's
usage and capped *before* a call starts: a call is only launched if the spend so far plus
the worst case of the calls in flight and of this one (prompt tokens × input price +
``max_tokens`` × output price) stays under ``max_spend_usd``.

Example::

    live = LiveAnswers("openai/gpt-4o-mini", price_in_per_m=0.15, price_out_per_m=0.6)
    answers = live.answers("gpt-4o-mini", probes)      # list[str | None], one per probe
    live.spend.usd, live.spend.calls, live.spend.failures
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from router_core.descriptors.base import ProbeSet
from router_core.env.litellm_env import litellm


class SpendCapExceeded(RuntimeError):
    """The next probe call could push the spend over the cap; nothing more was sent."""


@dataclass
class Spend:
    """What fingerprinting one model cost."""

    usd: float = 0.0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failures: int = 0
    priced: bool = True  # False when neither prices nor litellm's price map knew the model
    errors: list[str] = field(default_factory=list)


def _transient(exc: BaseException) -> bool:
    """Worth retrying: rate limits, server faults, timeouts, broken connections."""
    permanent = tuple(
        getattr(litellm, n)
        for n in (
            "BadRequestError",
            "AuthenticationError",
            "PermissionDeniedError",
            "NotFoundError",
            "ContextWindowExceededError",
        )
        if hasattr(litellm, n)
    )
    return not isinstance(exc, permanent)


class LiveAnswers:
    """An ``AnswerSource`` calling a live model through litellm.

    Args:
        litellm_model: litellm's model string, e.g. ``openai/gpt-4o-mini``.
        api_base / api_key: passed to litellm (an OpenAI-compatible server, for instance).
        price_in_per_m / price_out_per_m: USD per 1M tokens; default: litellm's price map.
        max_spend_usd: the cap for this model's probe calls.
        concurrency: calls in flight at once.
        retries: extra attempts per probe after a transient failure.
        progress: called with 1 after each probe (answered or given up).
    """

    def __init__(
        self,
        litellm_model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        price_in_per_m: float | None = None,
        price_out_per_m: float | None = None,
        max_spend_usd: float = 1.0,
        max_tokens: int = 256,
        concurrency: int = 4,
        retries: int = 3,
        backoff_s: float = 0.5,
        timeout_s: float = 60.0,
        extra_params: Mapping[str, Any] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.litellm_model = litellm_model
        self.api_base, self.api_key = api_base, api_key
        self.price_in = price_in_per_m
        self.price_out = price_out_per_m
        self.max_spend_usd = max_spend_usd
        self.max_tokens = max_tokens
        self.concurrency = concurrency
        self.retries = retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.extra_params = dict(extra_params or {})
        self.progress = progress
        self.spend = Spend()

    def _prices(self) -> tuple[float, float] | None:
        """USD per token (in, out): the given prices, else litellm's map, else None."""
        if self.price_in is not None or self.price_out is not None:
            return (self.price_in or 0.0) / 1e6, (self.price_out or 0.0) / 1e6
        info = litellm.model_cost.get(self.litellm_model) or litellm.model_cost.get(
            self.litellm_model.split("/", 1)[-1]
        )
        if not info:
            return None
        return float(info.get("input_cost_per_token") or 0), float(
            info.get("output_cost_per_token") or 0
        )

    def _messages(self, prompt: str) -> list[dict]:
        return [{"role": "user", "content": prompt}]

    def _worst_case(self, prompt: str, prices: tuple[float, float] | None) -> float:
        if prices is None:
            return 0.0
        n_in = litellm.token_counter(model=self.litellm_model, messages=self._messages(prompt))
        return n_in * prices[0] + self.max_tokens * prices[1]

    async def _one(
        self, prompt: str, sem: asyncio.Semaphore, state: dict, prices: tuple | None
    ) -> str | None:
        async with sem:
            worst = self._worst_case(prompt, prices)
            async with state["lock"]:
                if self.spend.usd + state["held"] + worst > self.max_spend_usd:
                    state["capped"] = True
                if state["capped"]:
                    return None
                state["held"] += worst
            try:
                return await self._call(prompt, prices)
            finally:
                async with state["lock"]:
                    state["held"] -= worst
                if self.progress is not None:
                    self.progress(1)

    async def _call(self, prompt: str, prices: tuple | None) -> str | None:
        params = {
            "model": self.litellm_model,
            "messages": self._messages(prompt),
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "timeout": self.timeout_s,
            **({"api_base": self.api_base} if self.api_base else {}),
            **({"api_key": self.api_key} if self.api_key else {}),
            **self.extra_params,
        }
        for attempt in range(self.retries + 1):
            try:
                resp = await litellm.acompletion(**params)
            except Exception as exc:  # noqa: BLE001 - any provider fault is retried or recorded
                self.spend.errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
                if attempt == self.retries or not _transient(exc):
                    self.spend.failures += 1
                    return None
                await asyncio.sleep(self.backoff_s * 2**attempt)
                continue
            self._account(resp, prices)
            text = resp.choices[0].message.content if resp.choices else None
            return text if isinstance(text, str) and text.strip() else None
        return None

    def _account(self, resp: Any, prices: tuple | None) -> None:
        usage = getattr(resp, "usage", None)
        n_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        n_out = int(getattr(usage, "completion_tokens", 0) or 0)
        self.spend.calls += 1
        self.spend.prompt_tokens += n_in
        self.spend.completion_tokens += n_out
        if prices is not None:
            self.spend.usd += n_in * prices[0] + n_out * prices[1]
        else:
            self.spend.priced = False

    async def answers_async(self, prompts: Sequence[str]) -> list[str | None]:
        sem = asyncio.Semaphore(self.concurrency)
        state = {"lock": asyncio.Lock(), "held": 0.0, "capped": False}
        prices = self._prices()
        out = await asyncio.gather(*(self._one(p, sem, state, prices) for p in prompts))
        if state["capped"]:
            raise SpendCapExceeded(
                f"stopped before the spend cap of ${self.max_spend_usd:.4f}: "
                f"${self.spend.usd:.4f} spent on {self.spend.calls} calls, "
                f"{sum(a is None for a in out)} of {len(prompts)} probes unanswered"
            )
        return list(out)

    def answers(self, model: str, probes: ProbeSet) -> list[str | None]:
        """One greedy answer per probe (``model`` is the router's name; unused here)."""
        return self.complete(probes.prompts)

    def complete(self, prompts: Sequence[str]) -> list[str | None]:
        """One greedy answer per prompt, from sync code or from inside an event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.answers_async(prompts))
        box: dict[str, Any] = {}  # inside a running loop: run ours in a worker thread

        def run() -> None:
            try:
                box["out"] = asyncio.run(self.answers_async(prompts))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller thread
                box["exc"] = exc

        t = threading.Thread(target=run)
        t.start()
        t.join()
        if "exc" in box:
            raise box["exc"]
        return box["out"]
