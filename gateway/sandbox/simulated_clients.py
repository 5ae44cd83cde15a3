"""The clients of ``tollgate simulate`` (gateway/sandbox/simulate.py): a tenant made through the
admin API, and its requests sent with the OpenAI SDK, each with its cost weight λ.

Apart from the run because they see the gateway only from outside, over HTTP, as a
deployment's clients would: the run itself reaches into the app (its learning loop, its pool).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from router_core.data.table import RoutingTable


def tenant_key(gw_url: str, admin_key: str) -> str:
    """A tenant without a budget, made through the admin API; its API key."""
    import httpx

    r = httpx.post(gw_url + "/admin/tenants", timeout=60,
                   headers={"authorization": f"Bearer {admin_key}"},
                   json={"name": "simulator", "budget_usd": None, "period": "total"})
    r.raise_for_status()
    return r.json()["api_key"]


class SimulatedClients:
    """The simulated clients: the OpenAI SDK against the gateway, and (``feedback ==
    "recorded"``) each served answer's recorded correctness posted to ``/v1/feedback``."""

    def __init__(self, gw_url: str, key: str, feedback: str,
                 truth: dict[tuple[str, str], float]) -> None:
        import openai

        self.gw_url, self.key, self.feedback, self.truth = gw_url, key, feedback, truth
        self.sdk = openai.OpenAI(base_url=gw_url + "/v1", api_key=key, max_retries=2,
                                 timeout=300)

    def send_round(self, table: RoutingTable, chunk: np.ndarray, lams: list[float],
                   workers: int) -> list[str]:
        """The round's prompts, each with its λ; returns the feedback posts refused."""
        failures: list[str] = []

        def one(args: tuple[int, float]) -> None:
            i, lam = args
            failure = self.ask(str(table.prompts[i]), lam)
            if failure is not None:
                failures.append(failure)

        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(one, zip(chunk.tolist(), lams)))
        return failures

    def ask(self, prompt: str, lam: float) -> str | None:
        import httpx

        raw = self.sdk.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": prompt}],
            extra_body={"tollgate": {"cost_weight": lam}})
        if self.feedback != "recorded":
            return None
        served = raw.parse().model
        fb = httpx.post(
            self.gw_url + "/v1/feedback", timeout=60,
            headers={"authorization": f"Bearer {self.key}"},
            json={"request_id": raw.headers["x-tollgate-request-id"],
                  "correct": self.truth[(prompt, served)] >= 0.5})
        # a refused post is counted and reported, not fatal
        return None if fb.status_code == 200 else f"{fb.status_code} {fb.text[:200]}"
