"""How long an upload's audio is, as a provider decoding it would find (issue 48.3): the
header's claim is not trusted, because a provider bills what it decodes.

libsndfile (litellm's ``calculate_request_duration``) reads a duration from the container's
header and stops decoding there: a FLAC whose STREAMINFO says 16 samples but holds 300 s, or
an MP3 of a 1 s file followed by 26 × 300 s files, read as 0.001 s and 1 s. So the seconds
reserved are the largest of the header's claim and:
- MP3: its frames counted (each MPEG audio frame header gives its samples and its length;
  the walk resyncs on the next ``0xFF`` after anything that is not a frame, as a decoder
  does, so concatenated files and junk between frames are all counted; ISO/IEC 11172-3 and
  13818-3 frame layout);
- FLAC: its frames counted (every frame header whose CRC-8 holds: its block size in samples,
  at the stream's sample rate; RFC 9639 section 9.1), not the STREAMINFO total;
- Ogg (Vorbis, Opus): its byte size at Opus' lowest bitrate, 6 kbit/s (RFC 6716 section
  2.1.1), a bound the container cannot lie below;
- WAV and other PCM: the data's bytes over the header's frame size (libsndfile's reading),
  which is also what a decoder plays.
A sample rate above ``MAX_RATE`` (no speech codec uses one) is refused as untrustworthy.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

MAX_RATE = 192_000
OPUS_MIN_BYTES_PER_S = 6000 / 8  # 6 kbit/s

# MPEG audio: bitrates (kbit/s) by (MPEG-1?, layer), index 1..14; sample rates by version
_BR = {
    (True, 1): (32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 3): (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


@dataclass(frozen=True)
class AudioLength:
    seconds: float | None  # None: no duration can be trusted
    reason: str = ""  # why not, when None


def _mp3_frame(data: bytes, pos: int) -> tuple[int, float] | None:
    """(length in bytes, seconds) of the MPEG audio frame at ``pos``, None if none is."""
    if pos + 4 > len(data) or data[pos] != 0xFF or data[pos + 1] & 0xE0 != 0xE0:
        return None
    version, layer_bits = (data[pos + 1] >> 3) & 3, (data[pos + 1] >> 1) & 3
    br_index, sr_index, pad = data[pos + 2] >> 4, (data[pos + 2] >> 2) & 3, \
        (data[pos + 2] >> 1) & 1
    if version == 1 or layer_bits == 0 or br_index in (0, 15) or sr_index == 3:
        return None
    layer, mpeg1 = 4 - layer_bits, version == 3
    bitrate = _BR[(mpeg1, layer)][br_index - 1] * 1000
    rate = _RATES[version][sr_index]
    if layer == 1:
        return (12 * bitrate // rate + pad) * 4, 384 / rate
    samples = 1152 if layer == 2 or mpeg1 else 576
    return samples // 8 * bitrate // rate + pad, samples / rate


def _byte_class(values: list[int]) -> bytes:
    return b"[" + b"".join(re.escape(bytes([v])) for v in values) + b"]"


# a frame header's first three bytes as a regular expression (version not reserved, layer
# not 0, bitrate index 1..14, sample rate index not 3): the resync scan runs in C, and every
# match is a frame that is counted, so junk costs no Python work
MP3_SYNC = re.compile(b"\xff" + _byte_class([b for b in range(0xE0, 0x100)
                                             if (b >> 3) & 3 != 1 and (b >> 1) & 3 != 0])
                      + _byte_class([b for b in range(256)
                                     if b >> 4 not in (0, 15) and (b >> 2) & 3 != 3]))
FLAC_SYNC = re.compile(b"\xff[\xf8\xf9]")
WINDOW = 8 * 1024  # bytes a regular expression scans at once (``_search``)
MAX_FALSE_SYNCS = 10_000  # FLAC: sync codes whose CRC-8 fails, before the file is refused


def _search(pattern: re.Pattern[bytes], data: bytes, pos: int) -> re.Match[bytes] | None:
    """``pattern.search(data, pos)`` a window at a time: ``re`` holds the GIL while it scans,
    and 8 MB of 0xFF bytes took it 0.5 s, so no scan spans more than ``WINDOW`` bytes."""
    while pos < len(data):
        m = pattern.search(data, pos, pos + WINDOW + 3)
        if m is not None:
            return m
        pos += WINDOW
    return None


def mp3_seconds(data: bytes) -> float:
    """Seconds of MPEG audio in ``data``: every frame found, resyncing after junk."""
    pos, seconds = 0, 0.0
    if data[:3] == b"ID3" and len(data) >= 10:  # ID3v2 tag: a syncsafe size
        pos = 10 + ((data[6] & 0x7F) << 21 | (data[7] & 0x7F) << 14 | (data[8] & 0x7F) << 7
                    | data[9] & 0x7F)
    while (m := _search(MP3_SYNC, data, pos)) is not None:
        frame = _mp3_frame(data, m.start())
        if frame is None or frame[0] <= 0:  # pragma: no cover - the pattern admits frames
            pos = m.start() + 1
            continue
        seconds += frame[1]
        pos = m.start() + frame[0]
    return seconds


def _crc8(data: bytes) -> int:
    crc = 0
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _flac_block(data: bytes, pos: int) -> int | None:
    """The samples of the FLAC frame whose header starts at ``pos`` (its CRC-8 holding)."""
    if pos + 6 > len(data) or data[pos] != 0xFF or data[pos + 1] & 0xFE != 0xF8:
        return None
    bs_code, sr_code = data[pos + 2] >> 4, data[pos + 2] & 0x0F
    if bs_code == 0 or sr_code == 15 or data[pos + 3] & 1 or (data[pos + 3] >> 4) > 10:
        return None
    i, first = pos + 4, data[pos + 4]  # the UTF-8-like coded frame or sample number
    extra = 0 if first < 0x80 else next((n for n in range(1, 7) if first >> (6 - n) ==
                                         (0xFF << (7 - n) & 0xFF) >> (6 - n)), -1)
    if extra < 0:
        return None
    i += 1 + extra
    if bs_code == 6:
        size, i = data[i] + 1 if i < len(data) else 0, i + 1
    elif bs_code == 7:
        size, i = int.from_bytes(data[i:i + 2], "big") + 1, i + 2
    elif bs_code == 1:
        size = 192
    elif bs_code <= 5:
        size = 576 << (bs_code - 2)
    else:
        size = 256 << (bs_code - 8)
    i += {12: 1, 13: 2, 14: 2}.get(sr_code, 0)
    if i >= len(data) or _crc8(data[pos:i]) != data[i]:
        return None
    return size


def flac_samples(data: bytes) -> int | None:
    """Samples in every FLAC frame of ``data`` (headers found by their sync code and CRC);
    None past ``MAX_FALSE_SYNCS`` sync codes that are no frame (a file built to cost CPU:
    compressed audio holds about one per 32 KB)."""
    total, false, pos = 0, 0, 4
    while (m := _search(FLAC_SYNC, data, pos)) is not None:
        pos = m.start() + 1
        block = _flac_block(data, m.start())
        if block is None:
            false += 1
            if false > MAX_FALSE_SYNCS:
                return None
        else:
            total += block
    return total


def audio_length(data: bytes) -> AudioLength:
    """The seconds to reserve for ``data`` (module docstring); None with a reason when the
    container is not readable or its numbers cannot be trusted."""
    import soundfile

    try:
        info = soundfile.info(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - libsndfile cannot read it: not a container it knows
        return AudioLength(None, "unreadable")
    if not 0 < info.samplerate <= MAX_RATE:
        return AudioLength(None, f"a sample rate of {info.samplerate} Hz")
    claimed = info.frames / info.samplerate if 0 <= info.frames < 2**62 else 0.0
    if info.format in ("MP3", "MPEG"):
        return AudioLength(max(claimed, mp3_seconds(data)))
    if info.format == "FLAC":
        samples = flac_samples(data)
        if samples is None:
            return AudioLength(None, "more sync codes than frames")
        return AudioLength(max(claimed, samples / info.samplerate))
    if info.format == "OGG":
        return AudioLength(max(claimed, len(data) / OPUS_MIN_BYTES_PER_S))
    return AudioLength(claimed) if claimed > 0 else AudioLength(None, "no frames")
