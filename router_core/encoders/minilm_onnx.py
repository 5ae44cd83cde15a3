"""``minilm-onnx``: the packaged MiniLM exported to ONNX (fp32), run by ONNX Runtime.

Same vectors as ``minilm`` (cosine > 0.999) without torch: the tokenizer is the HF
``tokenizers`` one MiniLM ships, truncated to the same window on the same side, and the
graph includes the mean pooling and normalisation.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from router_core.encoders.base import CachedEncoder
from router_core.encoders.exports import EXPORT_NAMES, ensure_export
from router_core.encoders.minilm import DIM


class MiniLMOnnxEncoder(CachedEncoder):
    """Φ on ONNX Runtime. ``threads``: intra-op threads; 1 by default, as a server runs one
    encode per request thread, concurrently; 0: one per core (``bulk_encoder``)."""

    kind = "minilm-onnx"

    def __init__(self, *, threads: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.threads = int(threads)
        self._lock = threading.Lock()
        self._session = None
        self._tokenizer = None

    @property
    def cache_name(self) -> str:
        return f"{super().cache_name}/{EXPORT_NAMES[self.kind]}"

    @property
    def dim(self) -> int:
        return DIM

    def _load(self):
        with self._lock:
            if self._session is None:
                import onnxruntime as ort
                from tokenizers import Tokenizer

                path = ensure_export(self.kind, self.cache_dir)
                options = ort.SessionOptions()
                options.intra_op_num_threads = self.threads
                options.inter_op_num_threads = 1
                # no caching arena: it keeps the largest batch's buffers for good (~20 MB of
                # a serving worker after a few requests) and saved no measurable time here
                options.enable_cpu_mem_arena = False
                tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
                # [CLS] + the kept word pieces + [SEP] = max_seq_length, as sentence-transformers
                tokenizer.enable_truncation(self.max_seq_length, direction=self.truncation_side)
                tokenizer.enable_padding()
                self._tokenizer = tokenizer
                self._session = ort.InferenceSession(
                    str(path / "model.onnx"), options, providers=["CPUExecutionProvider"]
                )
        return self._session, self._tokenizer

    def _embed(self, texts: Sequence[str], batch_size: int, progress: bool) -> np.ndarray:
        session, tokenizer = self._load()
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")  # less padding per batch
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        if progress:
            from tqdm import tqdm

            batches = tqdm(batches, desc=self.kind)
        for idx in batches:
            encodings = tokenizer.encode_batch([texts[i] for i in idx])
            feed = {
                "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
            }
            out[idx] = session.run(None, feed)[0]
        return out
