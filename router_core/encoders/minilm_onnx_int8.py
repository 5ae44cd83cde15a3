"""``minilm-onnx-int8``: the ONNX MiniLM with int8 weights (dynamic quantisation, per
channel): about half the fp32 graph's compute and a quarter of its size, with vectors
close to MiniLM's but not equal (routers are retrained on them)."""

from __future__ import annotations

from router_core.encoders.minilm_onnx import MiniLMOnnxEncoder


class MiniLMOnnxInt8Encoder(MiniLMOnnxEncoder):
    kind = "minilm-onnx-int8"
