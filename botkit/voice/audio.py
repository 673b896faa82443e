"""OGG/Opus, Telegram's voice-note format (``sendVoice`` also plays MP3 and M4A; botkit always
sends OGG/Opus, whose length it can read): recognising it, measuring it, converting other
audio to it.

Recognising and measuring read the OGG pages by hand (RFC 3533: a page starts with ``OggS``;
RFC 7845: the first packet of an Opus stream is ``OpusHead``, granule positions count 48 kHz
samples, less the header's pre-skip), so they need no dependency. Converting needs PyAV (the
``voice`` extra), imported only when a provider answered in another format.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from botkit.extras import require_extra

__all__ = ["OPUS_RATE", "is_ogg_opus", "ogg_opus_seconds", "to_ogg_opus", "tone_ogg_opus"]

OPUS_RATE = 48_000
"""Opus granule positions count samples at 48 kHz whatever the input's rate (RFC 7845 §4)."""
_PAGE_HEADER = struct.Struct("<4sBBqIIIB")
VOICE_BITRATE = 32_000
"""Bits per second of speech encoded here: clear for a voice, a quarter of libopus's default."""
_FRAME = 960
"""Samples of one 20 ms Opus frame at 48 kHz."""


def is_ogg_opus(data: bytes) -> bool:
    """Whether ``data`` is an OGG file whose first stream is Opus (what ``sendVoice`` plays)."""
    if not data.startswith(b"OggS") or len(data) < _PAGE_HEADER.size:
        return False
    segments = data[26]
    body = _PAGE_HEADER.size + segments
    return data[body : body + 8] == b"OpusHead"


def ogg_opus_seconds(data: bytes) -> float | None:
    """The length of an OGG/Opus file in seconds, from its last page's granule position;
    ``None`` when it is not one."""
    if not is_ogg_opus(data):
        return None
    head = _PAGE_HEADER.size + data[26]
    pre_skip = int(struct.unpack_from("<H", data, head + 10)[0])
    last = data.rfind(b"OggS")
    while last > 0 and last + _PAGE_HEADER.size > len(data):
        last = data.rfind(b"OggS", 0, last)
    granule = int(_PAGE_HEADER.unpack_from(data, last)[3])
    return max(granule - pre_skip, 0) / OPUS_RATE


def to_ogg_opus(data: bytes) -> bytes:
    """Any audio PyAV (ffmpeg) can read, re-encoded as mono OGG/Opus for ``sendVoice``."""
    require_extra("av", "voice", "Converting spoken answers to OGG/Opus")
    import av

    out_buffer = io.BytesIO()
    with av.open(io.BytesIO(data), "r") as source, av.open(out_buffer, "w", format="ogg") as out:
        stream: Any = out.add_stream("libopus", rate=OPUS_RATE)
        stream.layout = "mono"
        stream.bit_rate = VOICE_BITRATE
        resampler = av.AudioResampler(format="s16", layout="mono", rate=OPUS_RATE)
        for frame in source.decode(audio=0):
            for resampled in resampler.resample(frame):
                out.mux(stream.encode(resampled))
        for resampled in resampler.resample(None):
            out.mux(stream.encode(resampled))
        out.mux(stream.encode(None))
    return out_buffer.getvalue()


def tone_ogg_opus(seconds: float, hertz: float = 440.0) -> bytes:
    """A real OGG/Opus file of a quiet tone lasting ``seconds`` (for fakes, tests and try)."""
    require_extra("av", "voice", "Making OGG/Opus audio")
    import math

    import av

    frames = max(1, round(seconds * OPUS_RATE / _FRAME))
    samples = [round(2000 * math.sin(2 * math.pi * hertz * n / OPUS_RATE)) for n in range(_FRAME)]
    pcm = struct.pack(f"<{_FRAME}h", *samples)
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="ogg") as out:
        stream: Any = out.add_stream("libopus", rate=OPUS_RATE)
        stream.layout = "mono"
        stream.bit_rate = VOICE_BITRATE
        for index in range(frames):
            frame = av.AudioFrame(format="s16", layout="mono", samples=_FRAME)
            frame.planes[0].update(pcm)
            frame.sample_rate = OPUS_RATE
            frame.pts = index * _FRAME
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return buffer.getvalue()
