"""The torch MiniLM encoder Φ under its historical import path.

Every encoder kind lives in ``router_core.encoders`` (one module each); ``Encoder`` here is
the torch MiniLM one, and ``Encoder.for_router`` rebuilds whichever kind a router records.
"""

from router_core.encoders.base import HUB_ID, EmbeddingCache, default_cache_dir
from router_core.encoders.minilm import DIM, Encoder, default_model_path

__all__ = ["DIM", "HUB_ID", "EmbeddingCache", "Encoder", "default_cache_dir", "default_model_path"]
