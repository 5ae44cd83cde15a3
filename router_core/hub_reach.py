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


def hub_offline_if_unreachable(timeout_s: float = 2.0) -> bool:
    """Turn on huggingface_hub's offline mode when its endpoint (``HF_ENDPOINT``) cannot be
    reached within ``timeout_s``; returns whether offline mode is on. Blocking (a connect):
    call it off the event loop."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_OFFLINE") is not None or constants.HF_HUB_OFFLINE:
        return bool(constants.HF_HUB_OFFLINE)  # the operator decided
    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout_s):
            return False
    except OSError as exc:
        constants.HF_HUB_OFFLINE = True  # read by huggingface_hub at each call
        log.warning("Hugging Face hub %s unreachable (%s): tokenizers come from the local "
                    "cache only; litellm counts the others with tiktoken", constants.ENDPOINT,
                    exc.strerror or type(exc).__name__)
        return True
