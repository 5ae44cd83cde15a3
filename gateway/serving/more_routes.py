"""The serving routes beyond OpenAI's chat family: Anthropic's Messages API and the
unit-billed passthroughs (images, audio, moderations, rerank), each also at LiteLLM's bare
path (``/messages``, ``/rerank`` ...) as LiteLLM's proxy serves them."""

from __future__ import annotations

from fastapi import APIRouter

from gateway.serving.messages.count_tokens import count_tokens_endpoint
from gateway.serving.messages.messages_handler import messages_endpoint
from gateway.serving.units.transcription_handler import transcriptions_endpoint
from gateway.serving.units.unit_handlers import (
    images_endpoint,
    moderations_endpoint,
    rerank_endpoint,
    speech_endpoint,
)

ROUTES = (("/messages", messages_endpoint), ("/messages/count_tokens", count_tokens_endpoint),
          ("/images/generations", images_endpoint),
          ("/audio/speech", speech_endpoint), ("/audio/transcriptions", transcriptions_endpoint),
          ("/moderations", moderations_endpoint), ("/rerank", rerank_endpoint))


def build_router() -> APIRouter:
    r = APIRouter()
    for path, endpoint in ROUTES:
        r.add_api_route("/v1" + path, endpoint, methods=["POST"])
        r.add_api_route(path, endpoint, methods=["POST"], include_in_schema=False)
    return r
