"""Prices per backend, the cost a request reserves, and the cost it settles.

Reserved cost (what the budget holds before forwarding), a bound, not an estimate:
    ĉ = N_prompt · p_in + n_out_max · p_out
    N_prompt = B + k · I + k_f · F + M (+ T with tools)
B the UTF-8 bytes of everything sent upstream except image and file parts, I the number of
image parts, k the backend's ``max_image_tokens``, F the file parts and k_f its
``max_file_tokens`` (a backend without it is not sent files), M a margin for the provider's
framing, T the system prompt a provider adds to a request with tools. Every byte-level BPE
or byte-fallback tokenizer spends at least one byte per token, so N_prompt bounds the prompt
tokens whatever the tokenizer says. n_out_max is the output cap (or max_output_tokens).

Expected prompt tokens (routing, context windows): when N_prompt fits every window the
request could reach, no tokenizer runs (its tables are ~40-100 MB, bench/serving/
serve_memory.py):  n̂_prompt = ⌈B / 4⌉ + 3 + k · I + k_f · F
(4 bytes a token: OpenAI's rule of thumb for English; 3 prime the reply; M is a bound's, not
an estimate's). Otherwise the text is counted with litellm's tokenizer for the backend
(``litellm.encode``, offline) plus OpenAI's per-message framing, images k and files k_f
each; no image URL is ever read (litellm's counter would fetch a ``detail: high`` image).
A price of 0 in and 0 out from litellm's map is no price (the backend is refused, 503
``backend_unpriced``): only a config's own 0 bills a backend at $0.
Actual cost (what is settled):
    c = usage.prompt_tokens · p_in + usage.completion_tokens · p_out
at the answering deployment's price (litellm's ``cost_per_token`` for a map price, never above
the formula at the reservation's tier rates). Prices: config.yaml's ``model_info``, else
litellm's map for ``base_model`` or ``price_like`` (gateway/price_like.py), else its model's;
a group reserves at its dearest deployment's, rate by rate (``dearest``). Counting is CPU
work proportional to the prompt: callers run it in a worker thread.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config import Backend, ConfigError, ModelInfo, Settings
from gateway.price_like import borrowed_model
from gateway.provider import litellm_maps


@dataclass(frozen=True)
class Price:
    """USD per token in and out. ``model``: the litellm map entry the price came from (settled
    with litellm's cost functions); ``above``: litellm's long-prompt tiers, (prompt tokens
    past which, p_in, p_out), ascending."""

    input_per_token: float
    output_per_token: float
    model: str | None = field(default=None, compare=False)  # equal prices: equal rates
    above: tuple[tuple[int, float, float], ...] = ()
    service_tier: str | None = None  # a tier's price (``tier_price``), settled at that tier

    def rates(self, prompt_tokens: int) -> tuple[float, float]:
        """(p_in, p_out) for a prompt of ``prompt_tokens`` (never below the base rates)."""
        pin, pout = self.input_per_token, self.output_per_token
        for threshold, i, o in self.above:
            if prompt_tokens > threshold:
                pin, pout = max(pin, i), max(pout, o)
        return pin, pout

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        if not self.above:
            return prompt_tokens * self.input_per_token + completion_tokens * self.output_per_token
        pin, pout = self.rates(prompt_tokens)
        return prompt_tokens * pin + completion_tokens * pout

    def settle_cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """What an answer costs: litellm's ``cost_per_token`` for a map price, never more than
        ``cost`` (what the reservation bounded); ``cost`` for a config price."""
        bound = self.cost(prompt_tokens, completion_tokens)
        if self.model is None:
            return bound
        try:
            got = litellm_maps.cost_per_token(self.model, prompt_tokens, completion_tokens,
                                              self.service_tier)
        except Exception:  # noqa: BLE001 - litellm's look-up failing: the formula's price
            return bound
        # litellm answering 0 (or less) for tokens its map prices is no price: the formula's
        return min(got, bound) if got > 0 else bound

    def affordable_output_tokens(self, usd: float, prompt_tokens: int) -> int:
        """The largest n_out with n_prompt·p_in + n_out·p_out ≤ usd."""
        pin, pout = self.rates(prompt_tokens)
        left = usd - prompt_tokens * pin
        if left < 0:
            return 0
        if pout <= 0:
            return 1 << 30
        return int(left / pout)


_TIER = re.compile(r"^input_cost_per_token_above_(\d+)k_tokens$")


def _litellm_price(model: str) -> Price | None:
    info = litellm_maps.model_info(model)
    if info is None:
        return None
    pin, pout = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    if pin is None or pout is None:
        return None
    if not pin and not pout:  # 0/0: litellm's map answers it for a model it only half knows
        return None  # (claude-opus-4-1-20250805 in 1.110.2): no price, never a free model
    above = []
    for key, value in info.items():
        m = _TIER.match(key)
        if m and value is not None:
            out = info.get(f"output_cost_per_token_above_{m.group(1)}k_tokens")
            above.append((int(m.group(1)) * 1000, float(value),
                          float(out if out is not None else pout)))
    return Price(float(pin), float(pout), model, tuple(sorted(above)))


@functools.lru_cache(maxsize=1024)
def tier_price(price: Price, tier: str) -> Price | None:
    """``price`` at OpenAI-style ``service_tier`` ``tier`` (flex, priority, ...), from litellm's
    map: its ``input/output_cost_per_token_<tier>`` keys (the key named by litellm's own
    ``get_service_tier_cost_key``); None when the price is not litellm's or the map has no
    such rates. Reserved at the dearer of the standard and the tier rate, rate by rate (a
    provider serving the standard tier instead still fits the hold); settled by litellm's
    ``cost_per_token(service_tier=...)``, never above that."""
    if price.model is None:
        return None
    key = litellm_maps.service_tier_cost_key
    info = litellm_maps.model_info(price.model)
    if info is None:
        return None
    names = [key(f"{side}_cost_per_token", tier) for side in ("input", "output")]
    rates = [info.get(name) for name in names]
    if names == ["input_cost_per_token", "output_cost_per_token"] or None in rates:
        return None  # a tier litellm does not price, or not for this model
    pin, pout = (float(r) for r in rates)  # type: ignore[arg-type]
    above = tuple((t, max(i, pin), max(o, pout)) for t, i, o in price.above)
    return Price(max(price.input_per_token, pin), max(price.output_per_token, pout),
                 price.model, above, tier)


def dearest(prices: list[Price]) -> Price:
    """One price at least as dear as each of ``prices`` for any request, rate by rate (a
    group's reservation: whichever deployment answers, the hold covers it)."""
    if all(p == prices[0] for p in prices):
        return prices[0]
    thresholds = sorted({t for p in prices for t, _, _ in p.above})
    above = tuple((t, max(p.rates(t + 1)[0] for p in prices),
                   max(p.rates(t + 1)[1] for p in prices)) for t in thresholds)
    return Price(max(p.input_per_token for p in prices),
                 max(p.output_per_token for p in prices), None, above)


def deployment_prices(b: Backend) -> list[Price | None]:
    """The price of each deployment of ``b`` (None: neither model_info nor litellm's map has
    one); config prices for a model litellm lacks are registered with it."""
    out: list[Price | None] = []
    for params, info in zip(b.deployment_params(), b.deployment_infos(), strict=True):
        model = str(params["model"])
        pin = _per_token(info.input_cost_per_token, info.input_cost_per_million)
        pout = _per_token(info.output_cost_per_token, info.output_cost_per_million)
        base = borrowed_model(info)
        known = _litellm_price(str(base)) if base else None
        known = known or _litellm_price(model)
        if pin is not None and pout is not None:
            if known is None:
                _register(model, info, pin, pout)
            out.append(Price(float(pin), float(pout)))
        elif known is None:
            out.append(None)
        elif pin is None and pout is None:
            out.append(known)
        else:
            out.append(Price(float(known.input_per_token if pin is None else pin),
                             float(known.output_per_token if pout is None else pout)))
    return out


def resolve_prices(settings: Settings, strict: bool = True) -> dict[str, Price]:
    """Backend name -> the price its reservation takes (a group's dearest deployment);
    registers config prices with litellm for models it lacks.

    A backend with a deployment that has neither config prices nor a litellm price (for its
    base_model or model): budgets cannot be enforced on a model of unknown price, so
    ``strict`` raises ConfigError; otherwise it is left out (the gateway starts, warns, and
    neither routes nor forwards to it).
    """
    prices: dict[str, Price] = {}
    for b in settings.model_list:
        if b.is_wildcard:  # priced per concrete model a request names (Pool.concrete)
            continue
        each = deployment_prices(b)
        missing = [str(p["model"]) for p, price in zip(b.deployment_params(), each, strict=True)
                   if price is None]
        if missing and strict:
            raise ConfigError(
                f"backend {b.model_name!r}: no price in model_info and litellm does not "
                f"know {missing[0]!r}; set input/output_cost_per_million (or price_like)"
            )
        if not missing:
            prices[b.model_name] = dearest([p for p in each if p is not None])
    return prices


def _per_token(per_token: float | None, per_million: float | None) -> float | None:
    if per_token is not None:
        return per_token
    return None if per_million is None else per_million / 1e6


def _register(model: str, info: ModelInfo, pin: float, pout: float) -> None:
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    entry: dict[str, Any] = {
        "input_cost_per_token": pin,
        "output_cost_per_token": pout,
        "litellm_provider": provider,
        "mode": "chat",
        "max_output_tokens": info.max_output_tokens,
    }
    if info.max_input_tokens:
        entry["max_input_tokens"] = info.max_input_tokens
    litellm_maps.register_model(model, entry)


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

