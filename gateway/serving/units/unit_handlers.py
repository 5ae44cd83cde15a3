"""POST /v1/images/generations, /v1/audio/speech, /v1/moderations and /v1/rerank: passthroughs
to the named backend through litellm (``aimage_generation``, ``aspeech``, ``amoderation``,
``arerank``), each reserved at a bound on what it can cost, settled and logged
(gateway/serving/named_call.py; the prices: gateway/serving/units/unit_prices.py),
each in the frame every endpoint runs in (gateway/serving/endpoint.py ``serve_unit``).

The bounds, each known before the call:
- images: n × the price of one image at the dearest size and quality the request allows
  (left out or ``auto``: the dearest gpt-image may render) plus the prompt's text tokens
  (unit_prices.py ``image_cost``); settled at the reply's gpt-image ``usage`` when it reports
  one, else at the images answered;
- speech: the input's characters × the per-character price (what OpenAI bills);
- moderation: the input's token bound (UTF-8 bytes; ``max_image_tokens`` per image) × the
  input price, 0 for a free model; settled at the bound;
- rerank: search units × the per-query price, with Cohere's rule for units (module
  docstring of unit_prices.py): a document counts once per chunk of 500 tokens less the
  query, and tokens are bounded by bytes, so chunks_d ≤ ⌈b_d / max(1, 500 − b_q)⌉ and
  units ≤ ⌈Σ chunks_d / 100⌉; settled at the search units the provider reports.
Every one takes a slot of the key's and the tenant's ``max_parallel_requests`` before its body
is read and counts against their requests per minute (gateway/serving/endpoint.py); the
text ones reserve their input's UTF-8 bytes (a bound on its tokens) against their tokens per
minute (docs/endpoints.md).
Each body is checked key by key (an unknown key is a 400, as on chat), which keeps clients
from litellm's own keyword arguments.
"""

from __future__ import annotations

import math
from typing import Any

import anyio.to_thread
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from gateway.errors import invalid
from gateway.prompt_tokens import json_bytes
from gateway.serving.endpoint import serve_unit
from gateway.serving.named_call import call_provider, reply_json, settled
from gateway.serving.plan.backend_named import unit_backend
from gateway.serving.record.outcome import Outcome
from gateway.serving.request.chat_request import int_param, json_object, number_param, only_known
from gateway.serving.request.validation import json_body
from gateway.serving.units.unit_prices import (
    IMAGE,
    MODERATION,
    RERANK,
    SPEECH,
    image_cost,
    image_usage_cost,
    unit_price,
)

IMAGE_KEYS = frozenset({"model", "prompt", "n", "size", "quality", "response_format", "style",
                        "user", "background", "output_format", "output_compression",
                        "moderation"})
SPEECH_KEYS = frozenset({"model", "input", "voice", "response_format", "speed",
                         "instructions"})
MODERATION_KEYS = frozenset({"model", "input"})
RERANK_KEYS = frozenset({"model", "query", "documents", "top_n", "return_documents",
                         "rank_fields", "max_chunks_per_doc", "max_tokens_per_doc"})
MAX_IMAGES = 10  # OpenAI's bound on n
MAX_SPEECH_CHARS = 4096  # OpenAI's bound on a speech input
CHUNK_TOKENS, DOCS_PER_UNIT = 500, 100  # Cohere's search unit (unit_prices.py)
AUDIO_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac",
               "flac": "audio/flac", "wav": "audio/wav", "pcm": "audio/pcm"}


def _text(body: dict, key: str, limit: int | None = None) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise invalid(f"'{key}' is required and must be a non-empty string", param=key)
    if limit is not None and len(value) > limit:
        raise invalid(f"'{key}' is longer than {limit} characters", param=key)
    return value


async def _body(request: Request, keys: frozenset[str]) -> dict:
    """The JSON body, every key among ``keys`` (400 otherwise), its nulls left out."""
    body = json_object(await json_body(request))
    only_known(body, keys)
    return {k: v for k, v in body.items() if v is not None}


def _params(body: dict) -> dict:
    """What is passed to litellm: the body but its ``model`` (the backend's own is used)."""
    return {k: v for k, v in body.items() if k != "model"}


def _image_count(body: dict) -> int:
    """The images asked (``n``), once the body's fields are checked (400 naming one)."""
    _text(body, "prompt")
    n = int_param(body.get("n", 1), "n", 1, MAX_IMAGES)
    for key in ("size", "quality", "response_format", "style", "user", "background",
                "output_format", "moderation"):
        if key in body and not isinstance(body[key], str):
            raise invalid(f"'{key}' must be a string", param=key)
    return n


def _named(out: Outcome, model: Any, mode: str) -> Any:
    """The backend ``model`` names (backend_named.py ``unit_backend``), on the record."""
    return out.naming(unit_backend(out.ctx.pool.current, out.tenant, model, mode))


async def _images(out: Outcome, request: Request) -> Response:
    body = await _body(request, IMAGE_KEYS)
    backend = _named(out, body.get("model"), IMAGE)
    n = _image_count(body)
    prompt_bytes = len(body["prompt"].encode())
    bound = image_cost(backend, n, body.get("size"), body.get("quality"), prompt_bytes)
    await out.reserve_input(prompt_bytes)
    reply = reply_json(await call_provider(out, backend, bound, "image_generation",
                                           _params(body)))
    return JSONResponse(reply, headers=await settled(out, backend,
                                                     _image_charge(backend, reply, bound, n)))


def _image_charge(backend: Any, reply: dict, bound: float, n: int) -> float:
    """What an image reply costs: its reported ``usage`` at the token prices (gpt-image; a
    cost past what was held is the operator's overrun, booked when it settles); without
    usage, the bound's share of the images answered."""
    used = image_usage_cost(backend, reply.get("usage"))
    if used is None:
        answered = len(reply.get("data") or []) or n
        return bound * min(answered, n) / n
    return used


def _speech_format(body: dict) -> str:
    """The audio format asked, once the body's fields are checked (400 naming one)."""
    if not isinstance(body.get("voice"), (str, dict)):
        raise invalid("'voice' is required (a voice name)", param="voice")
    if "speed" in body:
        number_param(body["speed"], "speed", 0.25, 4.0)
    if "instructions" in body and not isinstance(body["instructions"], str):
        raise invalid("'instructions' must be a string", param="instructions")
    fmt = body.get("response_format", "mp3")
    if fmt not in AUDIO_TYPES:
        raise invalid(f"'response_format' must be one of {sorted(AUDIO_TYPES)}",
                      param="response_format")
    return fmt


async def _speech(out: Outcome, request: Request) -> Response:
    body = await _body(request, SPEECH_KEYS)
    backend = _named(out, body.get("model"), SPEECH)
    text = _text(body, "input", MAX_SPEECH_CHARS)
    fmt = _speech_format(body)
    bound = len(text) * unit_price(backend, SPEECH)
    await out.reserve_input(len(text.encode()))
    reply = await call_provider(out, backend, bound, "speech", _params(body))
    audio = reply.content if hasattr(reply, "content") else bytes(reply)
    headers = await settled(out, backend, bound)  # billed by the characters sent: known
    return Response(audio, media_type=AUDIO_TYPES[fmt], headers=headers)


def _moderation_input(raw: Any) -> tuple[int, int]:
    """(UTF-8 bytes of the input's text, its images); 400 on an invalid input."""
    if isinstance(raw, str) and raw:
        return len(raw.encode()), 0
    if isinstance(raw, list) and raw and all(isinstance(x, str) for x in raw):
        return json_bytes(raw), 0
    if isinstance(raw, list) and raw and all(
            isinstance(p, dict) and p.get("type") in ("text", "image_url") for p in raw):
        texts = [p for p in raw if p["type"] == "text"]
        return json_bytes(texts), len(raw) - len(texts)
    raise invalid("'input' must be a non-empty string, an array of strings, or an array of "
                  "text and image_url parts", param="input")


def _moderation_model(out: Outcome, body: dict) -> Any:
    """The body's ``model``; none: OpenAI's default, the one moderation backend, if one."""
    if body.get("model") is not None:
        return body["model"]
    named = [n for n, m in out.ctx.pool.current.modes.items() if m == MODERATION]
    if len(named) != 1:
        raise invalid("'model' is required: name a moderation backend", param="model")
    return named[0]


async def _moderations(out: Outcome, request: Request) -> Response:
    body = await _body(request, MODERATION_KEYS)
    backend = _named(out, _moderation_model(out, body), MODERATION)
    text_bytes, images = await anyio.to_thread.run_sync(_moderation_input, body.get("input"))
    tokens = text_bytes + images * backend.model_info.max_image_tokens
    await out.reserve_input(tokens)
    bound = tokens * unit_price(backend, MODERATION)
    reply = await call_provider(out, backend, bound, "moderation",
                                {"input": body["input"]})
    headers = await settled(out, backend, bound)
    return JSONResponse({**reply_json(reply), "model": backend.model_name}, headers=headers)


def search_units(query: str, documents: list) -> int:
    """The most search units a rerank can bill (module docstring)."""
    per_chunk = max(1, CHUNK_TOKENS - len(query.encode()))
    chunks = sum(math.ceil(max(1, json_bytes(d) if not isinstance(d, str)
                               else len(d.encode())) / per_chunk) for d in documents)
    return math.ceil(chunks / DOCS_PER_UNIT)


def _documents(body: dict) -> list:
    """The documents to rank, once they and ``top_n`` are checked (400 naming the field)."""
    docs = body.get("documents")
    if not isinstance(docs, list) or not docs or not all(isinstance(d, (str, dict))
                                                         for d in docs):
        raise invalid("'documents' must be a non-empty array of strings or objects",
                      param="documents")
    if "top_n" in body:
        int_param(body["top_n"], "top_n", 1, len(docs))
    return docs


async def _rerank(out: Outcome, request: Request) -> Response:
    body = await _body(request, RERANK_KEYS)
    backend = _named(out, body.get("model"), RERANK)
    query, docs = _text(body, "query"), _documents(body)
    price = unit_price(backend, RERANK)
    units = await anyio.to_thread.run_sync(search_units, query, docs)  # O(body) walk
    await out.reserve_input(len(query.encode()) + await anyio.to_thread.run_sync(
        json_bytes, docs))
    reply = reply_json(await call_provider(out, backend, units * price, "rerank",
                                           _params(body)))
    billed = ((reply.get("meta") or {}).get("billed_units") or {}).get("search_units")
    used = billed if isinstance(billed, (int, float)) and billed >= 0 else units
    return JSONResponse(reply, headers=await settled(out, backend, used * price))


async def images_endpoint(request: Request) -> Response:
    """OpenAI's image generation (``client.images.generate``)."""
    return await serve_unit(request, "images", _images)


async def speech_endpoint(request: Request) -> Response:
    """OpenAI's text to speech (``client.audio.speech.create``)."""
    return await serve_unit(request, "speech", _speech)


async def moderations_endpoint(request: Request) -> Response:
    """OpenAI's moderations (``client.moderations.create``)."""
    return await serve_unit(request, "moderations", _moderations)


async def rerank_endpoint(request: Request) -> Response:
    """Rerank as LiteLLM's proxy serves it (Cohere's request shape)."""
    return await serve_unit(request, "rerank", _rerank)
