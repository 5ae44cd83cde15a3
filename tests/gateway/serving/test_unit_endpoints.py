"""Images, speech, transcriptions, moderations and rerank through a real gateway with the
``openai`` SDK (rerank, which the SDK has not, with httpx): passthroughs through litellm,
each reserved at a bound that holds, settled at what was answered and logged; refused with a
400 naming what is missing when no bound can be computed.

Real parts: uvicorn, the openai SDK, litellm's aimage_generation / aspeech / atranscription /
amoderation / arerank over HTTP to the fake upstream (OpenAI's wire; Cohere's for rerank),
litellm's price map (tts-1, whisper-1, omni-moderation-latest, rerank-v3.5), libsndfile for
the audio's duration, SQLite.
"""

from __future__ import annotations

import io
import math
import wave
from collections.abc import Iterator

import httpx
import openai
import pytest

from gateway.config import settings_from_dict
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import Gateway, run_gateway
from tests.gateway.learning.conftest import learning_config
from tests.gateway.router_fixture import PRICES

IMAGE_PRICE = 0.04  # USD per image (model_info.output_cost_per_image)
TTS_PER_CHAR = 1.5e-05  # litellm's map, tts-1
WHISPER_PER_S = 0.0001  # litellm's map, whisper-1
RERANK_PER_QUERY = 0.002  # litellm's map, rerank-v3.5
TRANSCRIPT = "the fake transcript"


def entry(up: FakeUpstream, name: str, model: str, *, root: bool = False,
          **info: object) -> dict:
    base = up.base_url.removesuffix("/v1") if root else up.base_url
    return {"model_name": name, "model_info": info,
            "litellm_params": {"model": model, "api_base": base, "api_key": "sk-fake"}}


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    names = ["fake-image", "fake-image-dear", "tts-1", "whisper-1", "omni-moderation-latest",
             "rerank-v3.5", "fake-tts-unpriced"]
    with FakeUpstream([FakeBackend(n, reply=TRANSCRIPT) for n in [*names, *PRICES]]) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('units') / 'tollgate.db'}"
    cfg = learning_config(up, database_url=url)
    cfg["model_list"] += [
        entry(up, "fake-image", "openai/fake-image", mode="image_generation",
              output_cost_per_image=IMAGE_PRICE),
        entry(up, "tts-1", "openai/tts-1"),
        entry(up, "whisper-1", "openai/whisper-1"),
        entry(up, "omni-moderation-latest", "openai/omni-moderation-latest"),
        entry(up, "rerank", "cohere/rerank-v3.5", root=True),
        entry(up, "fake-tts-unpriced", "openai/fake-tts-unpriced", mode="audio_speech"),
    ]
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def wav(seconds: float, rate: int = 8000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\x00\x00" * int(seconds * rate))
    return buf.getvalue()


def spent(gw: Gateway, tenant_id: str) -> float:
    return gw.settled(tenant_id)["spent_usd"]


def test_images_reserve_n_images_and_settle_the_images_answered(
        gw: Gateway, up: FakeUpstream) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    raw = gw.client(key).images.with_raw_response.generate(
        model="fake-image", prompt="a lighthouse at dawn", n=2, size="1024x1024")
    img = raw.parse()
    assert len(img.data) == 2 and img.data[0].url
    assert up.requests_for("fake-image")[-1]["prompt"] == "a lighthouse at dawn"
    assert float(raw.headers["x-tollgate-cost-usd"]) == pytest.approx(2 * IMAGE_PRICE)
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert row["reason"] == "images" and row["chosen_model"] == "fake-image"
    assert row["reserved_usd"] == pytest.approx(2 * IMAGE_PRICE)
    assert row["cost_usd"] == pytest.approx(2 * IMAGE_PRICE) and row["status"] == 200
    assert spent(gw, tenant_id) == pytest.approx(2 * IMAGE_PRICE, abs=2e-9)
    poor, poor_id = gw.tenant(budget_usd=IMAGE_PRICE * 1.5)  # pays one image, not two
    with pytest.raises(openai.RateLimitError) as e:
        gw.client(poor).images.generate(model="fake-image", prompt="two of them", n=2)
    assert e.value.body["code"] == "budget_exceeded"
    assert spent(gw, poor_id) == 0


def test_speech_is_billed_by_the_input_characters(gw: Gateway) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    text = "Hello from the gateway, in a voice."
    raw = gw.client(key).audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=text)
    assert raw.content == b"FAKE-AUDIO:" + text.encode()
    assert raw.headers["content-type"] == "audio/mpeg"
    assert float(raw.headers["x-tollgate-cost-usd"]) == pytest.approx(len(text) * TTS_PER_CHAR)
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert row["reason"] == "speech" and row["chosen_model"] == "tts-1"
    assert spent(gw, tenant_id) == pytest.approx(len(text) * TTS_PER_CHAR, abs=2e-9)
    with pytest.raises(openai.BadRequestError) as e:  # no per-character price: no bound
        gw.client(key).audio.speech.create(model="fake-tts-unpriced", voice="alloy", input="x")
    assert "input_cost_per_character" in e.value.body["message"]
    assert e.value.body["code"] == "backend_unpriced"


def test_transcription_is_reserved_by_the_audios_duration(gw: Gateway, up: FakeUpstream) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    audio = wav(2.5)
    raw = gw.client(key).audio.transcriptions.with_raw_response.create(
        model="whisper-1", file=("speech.wav", audio, "audio/wav"), language="en")
    assert raw.parse().text == TRANSCRIPT
    sent = up.requests_for("whisper-1")[-1]
    assert sent["file"] == {"filename": "speech.wav", "bytes": len(audio)}
    assert sent["language"] == "en"
    expected = math.ceil(2.5) * WHISPER_PER_S
    assert float(raw.headers["x-tollgate-cost-usd"]) == pytest.approx(expected)
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert row["reason"] == "transcriptions" and row["reserved_usd"] == pytest.approx(expected)
    assert spent(gw, tenant_id) == pytest.approx(expected, abs=2e-9)
    with pytest.raises(openai.BadRequestError) as e:  # not audio: no duration, no bound
        gw.client(key).audio.transcriptions.create(
            model="whisper-1", file=("notes.m4a", b"not audio at all", "audio/mp4"))
    assert e.value.body["param"] == "file" and "duration" in e.value.body["message"]


def test_a_transcription_upload_over_the_size_limit_is_a_413(gw: Gateway) -> None:
    key, _ = gw.tenant()
    limit = gw.settings.reliability.max_body_bytes
    r = httpx.post(gw.base_url + "/v1/audio/transcriptions", timeout=60,
                   headers={"authorization": f"Bearer {key}"},
                   data={"model": "whisper-1"},
                   files={"file": ("big.wav", b"\x00" * (limit + 1), "audio/wav")})
    assert r.status_code == 413


def test_moderations_are_free_and_logged(gw: Gateway) -> None:
    key, tenant_id = gw.tenant(budget_usd=0.0)  # free: served on an empty budget
    raw = gw.client(key).moderations.with_raw_response.create(
        model="omni-moderation-latest", input=["I will kill the process", "hello"])
    mod = raw.parse()
    assert [r.flagged for r in mod.results] == [True, False]
    assert float(raw.headers["x-tollgate-cost-usd"]) == 0
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert row["reason"] == "moderations" and row["status"] == 200
    assert spent(gw, tenant_id) == 0
    with pytest.raises(openai.BadRequestError) as e:  # a chat model is not a moderation model
        gw.client(key).moderations.create(model="fake-cheap", input="x")
    assert e.value.body["code"] == "model_not_supported"


def test_rerank_is_billed_by_search_units(gw: Gateway, up: FakeUpstream) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    body = {"model": "rerank", "query": "capital of France",
            "documents": ["Paris is the capital of France", "Berlin is in Germany"], "top_n": 1}
    r = httpx.post(gw.base_url + "/v1/rerank", json=body, timeout=30,
                   headers={"authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["index"] == 0
    assert up.requests_for("rerank-v3.5")[-1]["query"] == "capital of France"
    assert float(r.headers["x-tollgate-cost-usd"]) == pytest.approx(RERANK_PER_QUERY)
    assert spent(gw, tenant_id) == pytest.approx(RERANK_PER_QUERY, abs=2e-9)
    bare = httpx.post(gw.base_url + "/rerank", json=body, timeout=30,
                      headers={"authorization": f"Bearer {key}"})
    assert bare.status_code == 200
    assert gw.log_row(bare.headers["x-tollgate-request-id"])["reason"] == "rerank"


def test_an_upstream_failure_is_logged_and_costs_nothing(gw: Gateway, up: FakeUpstream) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    up.set_mode("tts-1", "error_500", times=1)
    with pytest.raises(openai.APIStatusError) as e:
        gw.client(key).with_options(max_retries=0).audio.speech.create(
            model="tts-1", voice="alloy", input="fails")
    assert e.value.status_code == 502
    rid = e.value.response.headers["x-tollgate-request-id"]
    row = gw.log_row(rid)
    assert row["status"] == 502 and row["attempts"][0]["status"] == 500
    assert spent(gw, tenant_id) == 0


def test_a_malformed_upload_is_a_400_logged_as_one(gw: Gateway) -> None:
    key, _ = gw.tenant()
    r = httpx.post(gw.base_url + "/v1/audio/transcriptions", timeout=30,
                   headers={"authorization": f"Bearer {key}"}, data={"model": "whisper-1"},
                   files=[("file", ("a.wav", wav(0.5), "audio/wav")),
                          ("file", ("b.wav", wav(0.5), "audio/wav"))])
    assert r.status_code == 400, r.text
    assert "files" in r.json()["error"]["message"]
    row = gw.log_row(r.headers["x-tollgate-request-id"])
    assert row["status"] == 400 and row["reason"] == "transcriptions"


def test_a_unit_row_names_the_calling_key_as_a_chat_row_does(gw: Gateway) -> None:
    """Spend by key and by user is summed from the log's ``key_id`` (gateway/store/users.py):
    a unit-billed request counts for its key as chat and embeddings do."""
    key, _ = gw.tenant(budget_usd=1.0)
    chat = gw.client(key).chat.completions.with_raw_response.create(
        model="fake-cheap", messages=[{"role": "user", "content": "hi"}])
    speech = gw.client(key).audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input="for the key")
    chat_row = gw.log_row(chat.headers["x-tollgate-request-id"])
    row = gw.log_row(speech.headers["x-tollgate-request-id"])
    assert chat_row["key_id"] is not None
    assert row["key_id"] == chat_row["key_id"]
