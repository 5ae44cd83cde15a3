"""The body of ``POST /v1/embeddings``, validated as OpenAI defines it, and its token bound.

``input`` is a string, a list of strings, a list of token ids or a list of such lists (at most
2048 items, none empty); ``encoding_format`` ``float`` or ``base64``; ``dimensions`` a positive
integer; ``user`` a string. Any other key is a 400, as on chat completions. The budget bounds
the prompt without a tokenizer: a token is at least one UTF-8 byte of text, and one id of a
token list, plus ``FRAMING_TOKENS`` per input for the special tokens a model adds around each
one, so the bound holds whatever the backend's tokenizer says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import invalid

MAX_ITEMS = 2048  # OpenAI's limit on the inputs of one request
OPTIONAL = {"encoding_format", "dimensions", "user"}
# Special tokens an embedding model counts per input beyond its text: BERT-style models add
# [CLS] and [SEP] (BGE: 2), others BOS/EOS or an instruction marker; issue 35 measured a
# backend billing 4 per input (160 nUSD against a 40 nUSD reservation for a 1-byte input).
# 8 covers them with room; a backend counting more teaches its factor (bound_factors.py).
FRAMING_TOKENS = 8


@dataclass(frozen=True)
class EmbeddingsRequest:
    model: str
    input: str | list
    params: dict[str, Any]  # encoding_format, dimensions, user: passed on as they came

    def token_bound(self) -> int:
        """Tokens no tokenizer exceeds: UTF-8 bytes of text, one per given token id, plus
        ``FRAMING_TOKENS`` per input."""
        items = [self.input] if isinstance(self.input, str) else self.input
        if items and all(isinstance(x, int) for x in items):
            items = [items]  # one input given as token ids
        return sum(len(x.encode("utf-8")) if isinstance(x, str)
                   else len(x) if isinstance(x, list) else 1
                   for x in items) + FRAMING_TOKENS * len(items)


def _is_ids(x: Any) -> bool:
    return isinstance(x, list) and bool(x) and all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in x)


def _valid_input(value: Any) -> bool:
    if isinstance(value, str):
        return bool(value)
    if not isinstance(value, list) or not value or len(value) > MAX_ITEMS:
        return False
    if all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value):
        return True  # one input as token ids
    return all((isinstance(x, str) and x) or _is_ids(x) for x in value)


def parse_embeddings_request(body: Any) -> EmbeddingsRequest:
    """The validated request (400 in OpenAI's error format, naming the field, otherwise)."""
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    unknown = sorted(set(body) - {"model", "input"} - OPTIONAL)
    if unknown:
        raise invalid(f"unrecognized request argument supplied: {unknown[0]}",
                      param=unknown[0])
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("you must provide a model parameter", param="model")
    if not _valid_input(body.get("input")):
        raise invalid(f"input must be a non-empty string, or a list of at most {MAX_ITEMS} "
                      "non-empty strings or token-id lists", param="input")
    params = {k: body[k] for k in OPTIONAL if body.get(k) is not None}
    if params.get("encoding_format", "float") not in ("float", "base64"):
        raise invalid("encoding_format must be 'float' or 'base64'", param="encoding_format")
    dims = params.get("dimensions")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        raise invalid("dimensions must be a positive integer", param="dimensions")
    if "user" in params and not isinstance(params["user"], str):
        raise invalid("user must be a string", param="user")
    return EmbeddingsRequest(model, body["input"], params)
