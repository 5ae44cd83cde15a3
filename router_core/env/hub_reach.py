"""Hugging Face hub reachability, decided once per process instead of once per tokenizer.

litellm loads some backends' tokenizers from the hub (Llama 3 as ``Xenova/llama-3-tokenizer``,
Llama 2, ...). Where the hub cannot be reached, huggingface_hub retries each lookup five
times with backoff (~24 s) before litellm falls back to tiktoken, so a gateway with a Llama
backend started ~24 s late on an offline machine. One short TCP connect to the hub's host
decides: unreachable means huggingface_hub's offline mode (files from the local cache only,
failures at once); reachable, or offline mode set by the operator either way, changes
nothing.
"""

from __future__ import annotations

import logging
import os
import socket
from urllib.parse import urlsplit

log = logging.getLogger(__name__)


def unreachable_reason(timeout_s: float = 2.0) -> str | None:
    """Why the hub's endpoint (``HF_ENDPOINT``) cannot be reached within ``timeout_s``, None
    when it can or when offline mode is already set either way (the operator decided).
    Blocking (a connect): call it off the event loop."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_OFFLINE") is not None or constants.HF_HUB_OFFLINE:
        return None
    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"{constants.ENDPOINT} unreachable ({exc.strerror or type(exc).__name__})"


def go_offline() -> None:
    """huggingface_hub's offline mode for this process and the processes it starts."""
    from huggingface_hub import constants

    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True  # read by huggingface_hub at each call


def hub_offline_if_unreachable(timeout_s: float = 2.0) -> bool:
    """Turn on huggingface_hub's offline mode when its endpoint cannot be reached within
    ``timeout_s``; returns whether offline mode is on. Blocking: call it off the event loop.
    `tollgate serve` decides it once before its workers start and says so in its startup
    block; a worker then finds offline mode set and says nothing."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_OFFLINE") is not None or constants.HF_HUB_OFFLINE:
        return bool(constants.HF_HUB_OFFLINE)  # the operator (or `tollgate serve`) decided
    reason = unreachable_reason(timeout_s)
    if reason is None:
        return False
    go_offline()
    log.warning("Hugging Face hub %s: tokenizers come from the local cache only; litellm "
                "counts the others with tiktoken", reason)
    return True
