"""Logit footprints for open-weight models (CSCR Eq. 1-2).

For a model h whose weights transformers can load, decode T steps greedily from each of the
N probe prompts and read its next-token distribution at every step (Eq. 1),

    p_h(v | x, t) = softmax(logits_h(x)_t)_v,

then average over probes and steps on a shared basis of K tokens v_1..v_K:

    d_logit(h) = (1 / (N T)) Σ_i Σ_t [p_h(v_k | x^(i), t)]_{k=1..K} ∈ R^K                (Eq. 2)

The basis is the K most frequent tokens of the probe prompts under one *reference*
tokenizer (the artifact's scorer by default) and is recorded in the artifact as token
strings, so every model, added now or later, is read on the same coordinates; a model with
another tokenizer reads each basis string as the first token of its own encoding of it.
K defaults to N so logit and perplexity descriptors share one sphere S^{N-1} (CSCR §3.1.2,
mixed pools). ``normalisation="standard"`` (default) centres, scales and ℓ2-normalises each
row like every other kind; ``"l2"`` is the paper's plain ℓ2 (rows then sit in the positive
orthant and all look alike, which the standard form avoids).

Example::

    kind = LogitFootprint(T=10)
    E = kind.describe({"smollm2": None}, probes, ["smollm2"])   # None: the name is the path
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from router_core.descriptors.base import DescriptorKind, ProbeSet, unit_rows
from router_core.fingerprints.scorer import (
    DEFAULT_SCORER,
    default_cache_dir,
    load_causal_lm,
    resolve_scorer,
)


def top_token_basis(tokenizer: Any, texts: Sequence[str], k: int) -> list[str]:
    """The ``k`` most frequent tokens of ``texts`` as vocabulary pieces (ties: first seen)."""
    counts: Counter[int] = Counter()
    for text in texts:
        counts.update(tokenizer(text, add_special_tokens=False)["input_ids"])
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    ids = [i for i, _ in counts.most_common() if i not in special][:k]
    if len(ids) < k:  # tiny probe sets: pad with the lowest ids not yet taken
        taken = set(ids)
        ids += [i for i in range(len(tokenizer)) if i not in taken and i not in special][
            : k - len(ids)
        ]
    return list(tokenizer.convert_ids_to_tokens(ids))


def basis_ids(tokenizer: Any, basis: Sequence[str]) -> np.ndarray:
    """Each basis piece as a token id of ``tokenizer``: the same piece when its vocabulary
    has it, else the first token of its encoding of the piece's text."""
    vocab = tokenizer.get_vocab()
    out = []
    for piece in basis:
        if piece in vocab:
            out.append(vocab[piece])
            continue
        ids = tokenizer(tokenizer.convert_tokens_to_string([piece]), add_special_tokens=False)
        if not ids["input_ids"]:
            raise ValueError(f"the tokenizer encodes basis token {piece!r} to nothing")
        out.append(ids["input_ids"][0])
    return np.asarray(out, dtype=np.int64)


class LogitFootprint(DescriptorKind):
    """e_h = normalise(mean_{i,t} p_h(v_k | x_i, t)), k = 1..K (Eq. 2)."""

    name: ClassVar[str] = "logit"

    def __init__(
        self,
        *,
        K: int | None = None,
        T: int = 10,
        basis: Sequence[str] | None = None,
        reference: str = DEFAULT_SCORER,
        normalisation: str = "standard",
        chat_template: bool = True,
        max_prompt_tokens: int = 256,
        batch_size: int = 8,
        progress: Callable[[int], None] | None = None,
        threads: int | None = 1,
    ) -> None:
        if normalisation not in ("standard", "l2"):
            raise ValueError("normalisation is 'standard' or 'l2'")
        self.K = K
        self.T = T
        self.basis = list(basis) if basis is not None else None
        self.reference = reference
        self.normalisation = normalisation
        self.chat_template = chat_template
        self.max_prompt_tokens = max_prompt_tokens
        self.batch_size = batch_size
        self.progress = progress
        self.threads = threads  # torch CPU threads while decoding (see Scorer)

    def dim(self, probes: ProbeSet) -> int:
        if self.basis is not None:
            return len(self.basis)
        return self.K or len(probes)

    def fit_basis(self, probes: ProbeSet, tokenizer: Any | None = None) -> list[str]:
        """Fix the K-token basis from the probes (done once per artifact, then recorded)."""
        if self.basis is None:
            if tokenizer is None:
                _, tokenizer = load_causal_lm(resolve_scorer(self.reference), default_cache_dir())
            self.basis = top_token_basis(tokenizer, probes.prompts, self.dim(probes))
        return self.basis

    def _inputs(self, tok: Any, prompt: str) -> list[int]:
        if self.chat_template and getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
            )
            ids = ids["input_ids"] if isinstance(ids, Mapping) else ids
        else:
            ids = tok(prompt)["input_ids"]
        return list(ids)[-self.max_prompt_tokens :]

    def footprint(self, model: Any, tok: Any, probes: ProbeSet) -> np.ndarray:
        """(K,) Eq. 2 for one loaded model: mean over probes and decoded steps."""
        import torch

        before = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            return self._footprint(model, tok, probes)
        finally:
            torch.set_num_threads(before)

    def _footprint(self, model: Any, tok: Any, probes: ProbeSet) -> np.ndarray:
        import torch

        basis = self.fit_basis(probes)
        cols = torch.as_tensor(basis_ids(tok, basis))
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        eos = {int(e) for e in np.atleast_1d(model.generation_config.eos_token_id or [])}
        total = torch.zeros(len(basis), dtype=torch.float64)
        steps = 0
        for start in range(0, len(probes), self.batch_size):
            seqs = [self._inputs(tok, p) for p in probes.prompts[start : start + self.batch_size]]
            width = max(len(s) for s in seqs)
            ids = torch.full((len(seqs), width), pad, dtype=torch.long)
            mask = torch.zeros((len(seqs), width), dtype=torch.long)
            for r, s in enumerate(seqs):  # left padding: generation continues on the right
                ids[r, width - len(s) :] = torch.tensor(s)
                mask[r, width - len(s) :] = 1
            with torch.inference_mode():
                out = model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    do_sample=False,
                    max_new_tokens=self.T,
                    min_new_tokens=1,
                    output_logits=True,
                    return_dict_in_generate=True,
                    pad_token_id=pad,
                )
            alive = torch.ones(len(seqs), dtype=torch.bool)
            for t, logits in enumerate(out.logits):  # raw logits: Eq. 1 before processors
                p = torch.softmax(logits.double(), dim=-1)[:, cols]
                total += p[alive].sum(dim=0)
                steps += int(alive.sum())
                token = out.sequences[:, width + t]
                alive &= ~torch.isin(token, torch.tensor(sorted(eos) or [-1]))
            if self.progress is not None:
                self.progress(len(seqs))
        return (total / max(steps, 1)).numpy()

    def raw(self, source: Any, probes: ProbeSet, models: Sequence[str]) -> np.ndarray:
        """(m, K) Eq. 2 rows. ``source`` maps a model name to a loaded ``(model, tokenizer)``,
        a transformers id / path / ``.gguf`` file, or ``None`` (the name is the id)."""
        rows = []
        for name in models:
            spec = (source or {}).get(name) if isinstance(source, Mapping) else None
            if isinstance(spec, tuple):
                model, tok = spec
            else:
                model, tok = load_causal_lm(resolve_scorer(spec or name), default_cache_dir())
            rows.append(self.footprint(model, tok, probes))
        return np.stack(rows)

    def normalise(self, raw: np.ndarray) -> np.ndarray:
        if self.normalisation == "l2":
            return unit_rows(raw, center=False, scale=False)
        return unit_rows(raw)

    def config(self) -> dict:
        return {
            "name": self.name,
            "T": self.T,
            "K": len(self.basis) if self.basis is not None else self.K,
            "basis": self.basis,
            "reference": self.reference,
            "normalisation": self.normalisation,
            "chat_template": self.chat_template,
            "max_prompt_tokens": self.max_prompt_tokens,
        }

    @classmethod
    def from_config(cls, cfg: Mapping, **kwargs: Any) -> LogitFootprint:
        return cls(
            K=cfg.get("K"),
            T=int(cfg.get("T", 10)),
            basis=cfg.get("basis"),
            reference=cfg.get("reference", DEFAULT_SCORER),
            normalisation=cfg.get("normalisation", "standard"),
            chat_template=bool(cfg.get("chat_template", True)),
            max_prompt_tokens=int(cfg.get("max_prompt_tokens", 256)),
            **kwargs,
        )
