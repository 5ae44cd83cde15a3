"""POST /v1/audio/transcriptions: a multipart upload passed through ``litellm.atranscription``
to the named backend, reserved at the audio's duration × the per-second price, settled at it
and logged (gateway/serving/named_call.py), in the frame every endpoint runs in
(gateway/serving/endpoint.py ``serve_unit``).

The upload is bounded before it is read: the gateway's request-size limit (``BodyLimit``,
``reliability.max_body_bytes``) answers 413 as soon as the bytes passed it, and the form takes
one file and a few fields, read once the key's parallel slot is taken. Starlette spools a
file past 1 MB to disk and reads it back in a worker thread; the duration is what a decoder
would find, not the header's claim (gateway/serving/units/audio_length.py: MP3 and FLAC
frames counted, Ogg bounded by its bytes at Opus' lowest bitrate; issue 48.3), in a worker
thread too, so nothing here holds the event loop for the file's size. A file whose duration cannot be read (another
container such as m4a or webm, or not audio) is a 400 that names what is missing: without a
duration no bound holds for a per-second price. OpenAI bills whisper-1 per second of audio
(``input_cost_per_second`` in litellm's map); the duration is rounded up to a whole second.
"""

from __future__ import annotations

import math
from typing import Any

import anyio.to_thread
from fastapi import Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException

from gateway.errors import invalid
from gateway.serving.endpoint import serve_unit
from gateway.serving.named_call import call_provider, reply_json, settled
from gateway.serving.plan.backend_named import unit_backend
from gateway.serving.record.outcome import Outcome
from gateway.serving.units.audio_length import audio_length
from gateway.serving.units.unit_prices import TRANSCRIPTION, unit_price

FIELDS = frozenset({"model", "file", "language", "prompt", "response_format", "temperature",
                    "timestamp_granularities[]", "timestamp_granularities"})
TEXT_FORMATS = frozenset({"text", "srt", "vtt"})
MAX_FIELDS = 16


def _params(form: Any) -> dict[str, Any]:
    """The form's fields but ``model`` and ``file``, checked (400 on an unknown one)."""
    unknown = sorted(set(form.keys()) - FIELDS)
    if unknown:
        raise invalid(f"Unrecognized request argument supplied: {unknown[0]}", param=unknown[0])
    params: dict[str, Any] = {}
    for key in ("language", "prompt", "response_format"):
        if isinstance(form.get(key), UploadFile):
            raise invalid(f"'{key}' must be a text field, not a file", param=key)
        if form.get(key) is not None:
            params[key] = str(form[key])
    if form.get("temperature") is not None:
        try:
            params["temperature"] = float(form["temperature"])
        except ValueError as e:
            raise invalid("'temperature' must be a number", param="temperature") from e
    grains = form.getlist("timestamp_granularities[]") or form.getlist("timestamp_granularities")
    if grains:
        params["timestamp_granularities"] = [str(g) for g in grains]
    return params


async def _form(request: Request) -> FormData:
    """The multipart form (one file, at most MAX_FIELDS fields); a 400 naming why not."""
    try:
        return await request.form(max_files=1, max_fields=MAX_FIELDS)
    except HTTPException as e:  # Starlette's answer to a malformed or oversized form
        raise invalid(f"the multipart form was refused: {e.detail}", param="file") from e


async def _transcribe(out: Outcome, request: Request) -> Response:
    form = await _form(request)
    try:
        backend = out.naming(unit_backend(out.ctx.pool.current, out.tenant, form.get("model"),
                                          TRANSCRIPTION))
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise invalid("'file' is required: the audio to transcribe", param="file")
        params = _params(form)
        price = unit_price(backend, TRANSCRIPTION)
        data = await upload.read()  # from its spool file in a worker thread when on disk
        length = await anyio.to_thread.run_sync(audio_length, data)
        if length.seconds is None:
            raise invalid("the audio's duration could not be read from 'file' or cannot be "
                          f"trusted ({length.reason}; readable: WAV, FLAC, OGG, MP3): a "
                          "per-second price needs it to bound the cost", param="file",
                          code="audio_duration_unknown")
        bound = math.ceil(length.seconds) * price
        params["file"] = (upload.filename or "audio", data)
        reply = await call_provider(out, backend, bound, "transcription", params)
    finally:
        await form.close()  # its spool files
    headers = await settled(out, backend, bound)  # billed by the audio's seconds: known before
    if params.get("response_format") in TEXT_FORMATS:
        text = reply if isinstance(reply, str) else getattr(reply, "text", "")
        return PlainTextResponse(str(text), headers=headers)
    return JSONResponse(reply_json(reply), headers=headers)


async def transcriptions_endpoint(request: Request) -> Response:
    """OpenAI's audio transcriptions (``client.audio.transcriptions.create``)."""
    return await serve_unit(request, "transcriptions", _transcribe)
