"""The fake upstream's unit-billed routes, answered by the same backends and failure modes as
its chat completions (gateway/sandbox/upstream_handler.py dispatches here):
``/v1/images/generations`` (a URL or base64 per image; gpt-image's ``usage`` when the backend
has ``image_output_tokens``), ``/v1/audio/speech`` (the bytes
``FAKE-AUDIO:`` + the input), ``/v1/audio/transcriptions`` (multipart; the backend's reply as
the text, the file's size recorded), ``/v1/moderations`` (flagged when the input holds
"kill") and Cohere's ``/v1/rerank`` (documents scored by the words they share with the
query, ``meta.billed_units.search_units`` 1 per 100 documents; v1 and v2 alike).
"""

from __future__ import annotations

import base64
import email.parser
import json
import math
import time
import uuid
from typing import TYPE_CHECKING

from gateway.sandbox.upstream_wire import send_json

if TYPE_CHECKING:
    from gateway.sandbox.upstream_handler import UpstreamHandler

FAKE_PNG = b"\x89PNG fake image"


def answer_images(h: UpstreamHandler, raw: bytes) -> None:
    call = h.answerable(raw, streams=False)
    if call is None:
        return
    body = call.body
    b64 = body.get("response_format") == "b64_json"
    data = [{"b64_json": base64.b64encode(FAKE_PNG).decode()} if b64 else
             {"url": f"http://127.0.0.1/fake/{uuid.uuid4().hex}.png",
              "revised_prompt": body.get("prompt")} for _ in range(int(body.get("n") or 1))]
    out: dict = {"created": int(time.time()), "data": data}
    per_image = call.backend.image_output_tokens
    if per_image:  # gpt-image's usage: text tokens in, image tokens out
        text = len(str(body.get("prompt") or "").encode()) // 4 + 1
        out["usage"] = {"input_tokens": text, "output_tokens": per_image * len(data),
                        "total_tokens": text + per_image * len(data),
                        "input_tokens_details": {"text_tokens": text, "image_tokens": 0}}
    send_json(h, 200, out)


def answer_speech(h: UpstreamHandler, raw: bytes) -> None:
    call = h.answerable(raw, streams=False)
    if call is None:
        return
    h.send_response(200)
    audio = b"FAKE-AUDIO:" + str(call.body.get("input")).encode()
    h.send_header("content-type", "audio/mpeg")
    h.send_header("content-length", str(len(audio)))
    h.end_headers()
    h.wfile.write(audio)


def answer_transcription(h: UpstreamHandler, raw: bytes) -> None:
    """Multipart form: ``model`` and ``file`` (and OpenAI's other fields)."""
    head = f"content-type: {h.headers.get('content-type')}\r\n\r\n".encode()
    form = email.parser.BytesParser().parsebytes(head + raw)
    fields: dict = {}
    for part in form.get_payload() if form.is_multipart() else []:
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        fields[name] = {"filename": part.get_filename(), "bytes": len(payload)} \
            if part.get_filename() else payload.decode()
    h.up.record(fields, {k.lower(): v for k, v in h.headers.items()})
    b = h.up.backends.get(fields.get("model"))
    if b is None:
        h.answer_error(404, f"model {fields.get('model')!r} not found", "invalid_request_error")
        return
    if h.ready(b, False) is None:
        return
    send_json(h, 200, {"text": b.text_for({"messages": []})})


def answer_moderations(h: UpstreamHandler, raw: bytes) -> None:
    call = h.answerable(raw, streams=False)
    if call is None:
        return
    body, b = call.body, call.backend
    items = body["input"] if isinstance(body.get("input"), list) else [body.get("input")]
    results = []
    for x in items:
        flagged = "kill" in json.dumps(x).lower()
        results.append({"flagged": flagged, "categories": {"violence": flagged},
                        "category_scores": {"violence": 0.99 if flagged else 0.01}})
    send_json(h, 200, {"id": "modr-" + uuid.uuid4().hex[:12], "model": b.name,
                       "results": results})


def answer_rerank(h: UpstreamHandler, raw: bytes) -> None:
    call = h.answerable(raw, streams=False)
    if call is None:
        return
    body = call.body
    words = set(str(body.get("query", "")).lower().split())
    docs = body.get("documents") or []
    scores = [len(words & set(json.dumps(d).lower().replace('"', " ").split())) / (len(words) or 1)
              for d in docs]
    order = sorted(range(len(docs)), key=lambda i: -scores[i])[:body.get("top_n") or len(docs)]
    send_json(h, 200, {"id": uuid.uuid4().hex, "results": [
        {"index": i, "relevance_score": scores[i]} for i in order],
        "meta": {"billed_units": {"search_units": math.ceil(len(docs) / 100)}}})


ROUTES = {"/v1/images/generations": answer_images, "/v1/audio/speech": answer_speech,
          "/v1/audio/transcriptions": answer_transcription,
          "/v1/moderations": answer_moderations, "/v1/rerank": answer_rerank,
          "/v2/rerank": answer_rerank}
