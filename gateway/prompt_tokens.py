"""How many tokens a prompt is: the bound a reservation holds, the estimate routing uses,
and the count when the estimate is not enough.

Bound (gateway/pricing.py reserves N_prompt · p_in):
    N_prompt = B + k · I + k_f · F + M (+ T with tools)
B the UTF-8 bytes of everything sent upstream except image and file parts, I the number of
image parts, k the backend's ``max_image_tokens``, F the file parts and k_f its
``max_file_tokens`` (a backend without it is not sent files), M a margin for the provider's
framing, T the system prompt a provider adds to a request with tools. Every byte-level BPE
or byte-fallback tokenizer spends at least one byte per token, so N_prompt bounds the prompt
tokens whatever the tokenizer says.

Expected prompt tokens (routing, context windows): when N_prompt fits every window the
request could reach, no tokenizer runs (its tables are ~40-100 MB, bench/serving/
serve_memory.py):  n̂_prompt = ⌈B / 4⌉ + 3 + k · I + k_f · F
(4 bytes a token: OpenAI's rule of thumb for English; 3 prime the reply; M is a bound's, not
an estimate's). Otherwise the text is counted with litellm's tokenizer for the backend
(``litellm.encode``, offline) plus OpenAI's per-message framing, images k and files k_f
each; no image URL is ever read (litellm's counter would fetch a ``detail: high`` image).
Counting is CPU work proportional to the prompt: callers run it in a worker thread.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config import Backend
from gateway.provider import litellm_maps

PROMPT_MARGIN_TOKENS = 64  # M: role markers, reply priming, a default system block
# T: the system prompt a provider adds to a request with tools. Anthropic lists up to 530
# tokens (Claude 3 Opus, tool_choice auto: "Tool use system prompt token count",
# https://docs.anthropic.com/en/docs/tool-use-pricing-and-tokens), more than M.
TOOL_PREAMBLE_TOKENS = 530
# "one token generally corresponds to ~4 characters of text for common English text"
# (OpenAI, https://help.openai.com/en/articles/4936856-what-are-tokens-and-how-to-count-them)
BYTES_PER_TOKEN_ESTIMATE = 4
# Text is tokenized in pieces of this many characters: a tokenizer call holds the GIL.
TOKENIZE_CHUNK_CHARS = 32_768


def _kind(part: Any) -> str | None:
    """``image_url``, ``file`` (read by id or URL, or decoded: not bounded by its bytes)."""
    kind = part.get("type") if isinstance(part, dict) else None
    return kind if kind in ("image_url", "file") else None


def _split_media(messages: list[dict]) -> tuple[list[dict], int, int]:
    """The messages with image and file parts taken out, and how many of each there were."""
    out, counts = [], {"image_url": 0, "file": 0}
    for m in messages:
        content = m.get("content")
        kinds = [_kind(p) for p in content] if isinstance(content, list) else []
        if any(kinds):
            counts.update({k: counts[k] + kinds.count(k) for k in counts})
            m = {**m, "content": [p for p, k in zip(content, kinds, strict=True) if not k]}
        out.append(m)
    return out, counts["image_url"], counts["file"]


@dataclass(frozen=True)
class PromptSize:
    """B + M, I and F of N_prompt = B + k·I + k_f·F + M, measured once per request."""

    text_bytes: int  # B + M (+ T with tools)
    images: int  # I
    margin: int = PROMPT_MARGIN_TOKENS  # M (+ T): in the bound, not in the estimate
    files: int = 0  # F: file parts, bounded only where a backend declares k_f

    def bound(self, backend: Backend) -> int:
        """N_prompt for ``backend`` (its k = ``max_image_tokens``, k_f = ``max_file_tokens``;
        a backend without k_f never gets a request with files: gateway/serving/request/validation.py
        ``fit_candidates``)."""
        return (self.text_bytes + self.images * backend.model_info.max_image_tokens
                + self.files * (backend.model_info.max_file_tokens or 0))

    def fits(self, backend: Backend) -> bool:
        """Whether N_prompt fits ``backend``'s context window (any count then fits too)."""
        window = backend.model_info.max_input_tokens
        return window is None or self.bound(backend) <= window

    def estimate(self, backend: Backend) -> int:
        """n̂_prompt = ⌈B / 4⌉ + 3 + k·I (module docstring): no tokenizer."""
        text = max(0, self.text_bytes - self.margin)
        return (-(-text // BYTES_PER_TOKEN_ESTIMATE) + REPLY_PRIMING_TOKENS
                + self.images * backend.model_info.max_image_tokens
                + self.files * (backend.model_info.max_file_tokens or 0))


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def json_bytes(value: Any) -> int:
    """UTF-8 bytes of ``value`` as compact JSON (a string escape counted as its character,
    which is what a tokenizer sees). An iterative walk, not ``json.dumps``: the walk gives the
    GIL back between values, a dump of a multi-MB body holds it throughout."""
    total, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += 2 + _utf8_len(v)
        elif isinstance(v, dict):
            total += 2 + 2 * len(v)  # braces, a colon and a comma per member
            for k, x in v.items():
                stack.append(str(k))
                stack.append(x)
        elif isinstance(v, (list, tuple)):
            total += 2 + len(v)
            stack.extend(v)
        else:
            total += len(json.dumps(v))
    return total


def prompt_size(messages: list[dict], params: Mapping[str, Any]) -> PromptSize:
    """Measure what is sent upstream: messages and every parameter, image parts apart; a
    request with tools (or functions) adds the provider's tool preamble T to the margin."""
    text_only, images, files = _split_media(messages)
    margin = PROMPT_MARGIN_TOKENS
    if params.get("tools") or params.get("functions"):
        margin += TOOL_PREAMBLE_TOKENS
    return PromptSize(json_bytes({"messages": text_only, **params}) + margin, images, margin,
                      files)


def prompt_token_bound(backend: Backend, messages: list[dict], params: Mapping[str, Any]
                       ) -> int:
    """N_prompt = B + k·I + M (module docstring): prompt tokens no tokenizer exceeds."""
    return prompt_size(messages, params).bound(backend)


def expected_prompt_tokens(backend: Backend, messages: list[dict], params: Mapping[str, Any],
                           reachable: Iterable[Backend]) -> tuple[int, PromptSize]:
    """(expected prompt tokens on ``backend``, the prompt's size). Counted with ``backend``'s
    tokenizer only when N_prompt passes the window of a backend in ``reachable`` (those a
    fit check may weigh it against); else estimated (module docstring)."""
    size = prompt_size(messages, params)
    estimate = estimated_prompt_tokens(backend, size, reachable)
    if estimate is not None:
        return estimate, size
    return count_prompt_tokens(backend, messages, params.get("tools")), size


def estimated_prompt_tokens(backend: Backend, size: PromptSize, reachable: Iterable[Backend]
                            ) -> int | None:
    """n̂_prompt on ``backend`` when N_prompt fits every window of ``reachable``; None when
    a window is in question (then only a count will do)."""
    return size.estimate(backend) if all(size.fits(b) for b in reachable) else None


# Framing around the text of a chat prompt, as OpenAI counts it: 3 tokens a message (4 kept
# here: a name field adds 1) and 3 priming the reply ("How to count tokens with tiktoken",
# https://github.com/openai/openai-cookbook/blob/main/examples/How_to_count_tokens_with_tiktoken.ipynb)
TOKENS_PER_MESSAGE = 4
REPLY_PRIMING_TOKENS = 3


def count_prompt_tokens(
    backend: Backend, messages: list[dict], tools: list[dict] | None = None
) -> int:
    """Prompt tokens as the backend's tokenizer counts them: each message's text parts, its
    other fields (name, tool calls) as JSON, the tool definitions as JSON, and the framing;
    each image part counts ``max_image_tokens`` and its URL is never read."""
    text_only, images, files = _split_media(messages)
    total = (images * backend.model_info.max_image_tokens + REPLY_PRIMING_TOKENS
             + files * (backend.model_info.max_file_tokens or 0))
    try:
        for m in text_only:
            other = {k: v for k, v in m.items() if k not in ("role", "content")}
            total += TOKENS_PER_MESSAGE + sum(count_text_tokens(backend, t)
                                              for t in _texts([m]))
            if other:
                total += count_text_tokens(backend, json.dumps(other, ensure_ascii=False))
        if tools:
            total += count_text_tokens(backend, json.dumps(tools, ensure_ascii=False))
        return total
    except Exception:  # noqa: BLE001 - a part that is not JSON: fall back to the bound
        return prompt_token_bound(backend, messages, {"tools": tools} if tools else {})


def _texts(messages: list[dict]) -> list[str]:
    """The text a tokenizer sees in each message: its content string or text parts."""
    out = []
    for m in messages:
        content = m.get("content")
        parts = content if isinstance(content, list) else [content]
        out.extend(p if isinstance(p, str) else str(p.get("text") or "")
                   for p in parts if isinstance(p, (str, dict)))
    return out


def count_text_tokens(backend: Backend, text: str) -> int:
    """Tokens of ``text`` (streamed text when a stream ends without a usage chunk), counted
    in pieces of ``TOKENIZE_CHUNK_CHARS`` (a piece boundary may split one token in two) by
    the tokenizer litellm selects for the backend, loaded on first use. ``litellm.encode``,
    not ``token_counter``: ``tollgate serve`` turns litellm's own counting off
    (``disable_token_counter``, gateway/cli/serve.py), which zeroes ``token_counter``."""
    if not text:
        return 0
    try:
        return sum(litellm_maps.encoded_tokens(backend.litellm_model,
                                               text[i:i + TOKENIZE_CHUNK_CHARS])
                   for i in range(0, len(text), TOKENIZE_CHUNK_CHARS))
    except Exception:  # noqa: BLE001 - never fewer than the bytes: a bound, as above
        return len(text.encode("utf-8", "replace"))

