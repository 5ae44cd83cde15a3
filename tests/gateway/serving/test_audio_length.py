"""Transcriptions bounded by the audio a decoder finds, not the header's claim (issue 48.3),
through a running gateway (the openai SDK over HTTP, litellm's atranscription to the fake
upstream, whisper-1's price from litellm's map, SQLite), and the counting itself on files
written by libsndfile (soundfile) and then altered as a hostile client would.

Was: a FLAC whose STREAMINFO says 16 samples but holds 300 s was charged $0.0001 (300×); an
MP3 of a 1 s file followed by 300 s files was charged for 1 s.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator

import numpy as np
import pytest
import soundfile

from gateway.config import settings_from_dict
from gateway.serving.units.audio_length import audio_length
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import Gateway, run_gateway
from tests.gateway.learning.conftest import learning_config
from tests.gateway.router_fixture import PRICES
from tests.gateway.serving.test_unit_endpoints import WHISPER_PER_S, entry

RATE = 16000


def encoded(seconds: float, fmt: str, subtype: str | None = None) -> bytes:
    rng = np.random.default_rng(0)
    buf = io.BytesIO()
    soundfile.write(buf, (rng.standard_normal(int(seconds * RATE)) * 0.1).astype("float32"),
                    RATE, format=fmt, subtype=subtype)
    return buf.getvalue()


def lying_flac(seconds: float, claimed_samples: int = 16) -> bytes:
    """A FLAC whose STREAMINFO total-samples field (36 bits, ending at byte 26) says
    ``claimed_samples``."""
    data = bytearray(encoded(seconds, "FLAC"))
    field = int.from_bytes(data[18:26], "big")
    field = (field & ~((1 << 36) - 1)) | claimed_samples
    data[18:26] = field.to_bytes(8, "big")
    return bytes(data)


def test_a_lying_flac_is_counted_by_its_frames() -> None:
    data = lying_flac(30)
    assert soundfile.info(io.BytesIO(data)).frames == 16  # what libsndfile believes
    assert audio_length(data).seconds == pytest.approx(30, abs=0.5)


def test_concatenated_mp3s_are_counted_whole() -> None:
    one = encoded(1, "MP3", "MPEG_LAYER_III")
    data = one + encoded(20, "MP3", "MPEG_LAYER_III") * 3
    assert soundfile.info(io.BytesIO(data)).duration == pytest.approx(1, abs=0.1)
    assert audio_length(data).seconds == pytest.approx(61, abs=1)


def test_honest_files_read_as_their_length() -> None:
    for fmt, sub in (("WAV", None), ("FLAC", None), ("MP3", "MPEG_LAYER_III")):
        assert audio_length(encoded(12, fmt, sub)).seconds == pytest.approx(12, abs=0.3)


def test_ogg_is_bounded_by_its_bytes_and_junk_is_refused() -> None:
    data = encoded(10, "OGG", "VORBIS")
    assert audio_length(data).seconds >= len(data) / 750 >= 10
    flooded = encoded(2, "FLAC") + b"\xff\xf8\x00\x00" * 100_000  # sync codes, no frames
    assert audio_length(flooded).seconds is None
    assert audio_length(b"not audio at all").seconds is None


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    with FakeUpstream([FakeBackend(n, reply="ok") for n in ["whisper-1", *PRICES]]) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('audio') / 'tollgate.db'}"
    cfg = learning_config(up, database_url=url)
    cfg["model_list"].append(entry(up, "whisper-1", "openai/whisper-1"))
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


@pytest.mark.parametrize("name", ["flac", "mp3"])
def test_a_transcription_is_charged_for_the_audio_sent(gw: Gateway, name: str) -> None:
    """The header says 1 s or less; the file holds 61 s (mp3) or 60 s (flac): the hold and
    the charge are for what it holds."""
    key, tenant_id = gw.tenant(budget_usd=1.0)
    if name == "flac":
        data, seconds = lying_flac(60), 60
    else:
        data = encoded(1, "MP3", "MPEG_LAYER_III") + encoded(20, "MP3", "MPEG_LAYER_III") * 3
        seconds = 61
    raw = gw.client(key).audio.transcriptions.with_raw_response.create(
        model="whisper-1", file=(f"a.{name}", data, f"audio/{name}"))
    charged = float(raw.headers["x-tollgate-cost-usd"])
    assert charged >= seconds * WHISPER_PER_S - 1e-12  # undercharge multiple ≤ 1
    assert charged <= math.ceil(seconds + 1) * WHISPER_PER_S
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(charged, abs=2e-9)
