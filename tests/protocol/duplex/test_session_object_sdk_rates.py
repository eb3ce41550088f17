"""Session objects with non-default rates still validate against the OpenAI SDK.

OpenAI's GA schema allows ``rate`` only as 24000 on ``audio/pcm``; we state other rates
beside the format (``sample_rate_hz``) so a 16 kHz or G.711 session stays SDK-valid and a
client echoing the object back keeps its rate.
"""

from __future__ import annotations

import openai.types.beta.realtime as beta
import openai.types.realtime as ga
import pydantic
import pytest

from omniduplex.protocol.duplex import (
    AudioFormat,
    RealtimeInputDefaults,
    build_session_object,
    events,
    next_input_defaults,
)

GA = pydantic.TypeAdapter(ga.RealtimeServerEvent)
BETA = pydantic.TypeAdapter(beta.RealtimeServerEvent)

CASES = [
    (AudioFormat("pcm16", 16000), AudioFormat("pcm16", None)),
    (AudioFormat("pcm16", 24000), AudioFormat("g711_ulaw", None)),
    (AudioFormat("g711_alaw", 8000), AudioFormat("pcm16", 16000)),
    (AudioFormat("pcm16", 48000), AudioFormat("pcm16", 24000)),
]


@pytest.mark.parametrize(("fmt_in", "fmt_out"), CASES)
@pytest.mark.parametrize(("dialect", "adapter"), [("ga", GA), ("beta", BETA)])
def test_session_created_validates(fmt_in, fmt_out, dialect, adapter) -> None:
    formats = RealtimeInputDefaults(input_format=fmt_in, output_format=fmt_out)
    event = events.SessionCreated(session=build_session_object("duplex-1", formats=formats))
    rendered = event.to_realtime(dialect)
    parsed = adapter.validate_python(rendered)
    assert parsed.type == "session.created"


@pytest.mark.parametrize(("fmt_in", "fmt_out"), CASES)
def test_echoed_object_keeps_the_rates(fmt_in, fmt_out) -> None:
    formats = RealtimeInputDefaults(input_format=fmt_in, output_format=fmt_out)
    echoed = build_session_object("duplex-1", formats=formats)
    again = next_input_defaults(RealtimeInputDefaults(), echoed)
    assert again.input_sample_rate_hz == formats.input_sample_rate_hz
    assert again.input_format.name == fmt_in.name
    assert again.output_format.name == fmt_out.name
