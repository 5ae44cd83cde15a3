"""The replay upstream of ``tollgate simulate``: an OpenAI-compatible server on 127.0.0.1 that
answers as the benchmark's models did, with each model's recorded answer to the prompt and
usage priced so the gateway's cost is the recorded USD (output price p_m = mean recorded cost
of m / ``TOKENS_PER_MEAN_QUERY`` per token, completion tokens = recorded cost / p_m; input is
free). With a ``RecordedJudge`` (gateway/sandbox/recorded_judge.py) it also answers as the
learning loop's judge backend, under the judge's name. With ``aliases`` (served name → the
benchmark's model) other backends answer as benchmark models: a config's own backends
replaced by recorded answers (bench/routing/learning_loop.py ``--packaged``)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from gateway.sandbox.local_upstream import send_json
from gateway.sandbox.recorded_judge import RecordedJudge
from router_core.data.table import RoutingTable

TOKENS_PER_MEAN_QUERY = 1000  # p_m = mean cost / this: a typical answer is ~1000 "tokens"


class Replay:
    """Recorded answers, grades and costs by (prompt text, model)."""

    def __init__(self, table: RoutingTable, aliases: dict[str, str] | None = None) -> None:
        self.models = table.models
        self.aliases = dict(aliases or {})
        mean = np.nanmean(table.cost, axis=0)
        self.price = {m: float(mean[j]) / TOKENS_PER_MEAN_QUERY for j, m in enumerate(self.models)}
        self.cells: dict[tuple[str, str], tuple[str, float, float]] = {}
        for i, prompt in enumerate(map(str, table.prompts)):
            for j, m in enumerate(self.models):
                q, c = table.quality[i, j], table.cost[i, j]
                if np.isfinite(q) and np.isfinite(c):
                    resp = table.responses.get(m)
                    text = "" if resp is None or resp[i] is None else str(resp[i])
                    self.cells[(prompt, m)] = (text, float(q), float(c))

    def answer(self, prompt: str, model: str, max_tokens: int | None) -> dict:
        served, model = model, self.aliases.get(model, model)
        text, _, cost = self.cells[(prompt, model)]
        tokens = max(1, round(cost / self.price[model]))
        if max_tokens is not None:
            tokens = min(tokens, int(max_tokens))
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex, "object": "chat.completion",
            "created": int(time.time()), "model": served,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": tokens, "total_tokens": tokens},
        }

    def judge_cells(self) -> list[tuple[str, str, float]]:
        """(prompt, recorded answer, its grade) of every cell: what a ``RecordedJudge`` reads."""
        return [(prompt, text, q) for (prompt, _), (text, q, _) in self.cells.items()]

    def grade(self, prompt: str, model: str, answer: str) -> float | None:
        """The reference check: the recorded grade of exactly this recorded answer."""
        cell = self.cells.get((prompt, model))
        if cell is None or cell[0] != answer:
            return None
        return cell[1]


def _rubric(body: dict) -> str:
    return "\n\n".join(str(m.get("content", "")) for m in body.get("messages", []))


def _judged(judge: RecordedJudge, body: dict) -> dict:
    """The judge's answer to a rubric, as a chat completion (usage: words in, 8 out)."""
    text = _rubric(body)
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex, "object": "chat.completion",
        "created": int(time.time()), "model": body.get("model") or judge.name,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": judge.reply(text)},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": len(text.split()), "completion_tokens": 8,
                  "total_tokens": len(text.split()) + 8},
    }


def _handler(replay: Replay, judge: RecordedJudge | None = None, any_model: bool = False
             ) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            if judge is not None and (body.get("model") == judge.name or (
                    any_model and judge.is_rubric(_rubric(body)))):
                send_json(self, 200, _judged(judge, body))
                return
            prompt = "\n\n".join(
                str(m.get("content", ""))
                for m in reversed(body.get("messages", []))
                if m.get("role") in ("system", "developer", "user")
            )
            try:
                out, status = replay.answer(prompt, body["model"], body.get("max_tokens")), 200
            except KeyError:
                msg = f"no recorded answer of {body.get('model')!r} to this prompt"
                out = {"error": {"message": msg, "type": "invalid_request_error",
                                 "param": "messages", "code": "not_recorded"}}
                status = 404
            send_json(self, status, out)

    return Handler


@contextmanager
def replay_upstream(replay: Replay, judge: RecordedJudge | None = None,
                    any_model: bool = False) -> Iterator[str]:
    """Serve ``replay`` (and ``judge`` under its name; with ``any_model``, every rubric prompt
    whichever backend it is sent to, as when the pool's own strongest backend judges) on
    127.0.0.1; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(replay, judge, any_model))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
