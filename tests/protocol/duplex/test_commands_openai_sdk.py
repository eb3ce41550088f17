"""Every client event the ``openai`` SDK builds decodes to the right typed command.

The samples are the SDK's own TypedDicts; each is first checked against the SDK's client
event union (so the sample really is what a stock client sends), then sent through JSON
to the decoder, as a socket would deliver it.
"""

from __future__ import annotations

import typing
from typing import Any

import openai.types.beta.realtime as sdk_beta
import openai.types.realtime as sdk_ga
import orjson
import pydantic
import pytest
from sdk_client_event_samples import TONE_B64, beta_samples, ga_samples, pcm16_tone

from omniduplex.protocol.duplex import commands as cmd
from omniduplex.protocol.realtime.base import RealtimeCommand
from omniduplex.protocol.realtime.formats import G711_ALAW, G711_ULAW, AudioFormat

GA_SAMPLES = ga_samples()
BETA_SAMPLES = beta_samples()
GA_CLIENT = pydantic.TypeAdapter(sdk_ga.RealtimeClientEventParam)
BETA_CLIENT = pydantic.TypeAdapter(sdk_beta.RealtimeClientEventParam)


def decode_wire(payload: dict[str, Any]) -> RealtimeCommand:
    return cmd.decode_client_frame(orjson.dumps(payload))


def _sdk_type_names(union: Any) -> set[str]:
    names: set[str] = set()
    for member in typing.get_args(union):
        # Required[...] is stripped here, leaving the Literal.
        literal = typing.get_type_hints(member)["type"]
        names.add(typing.get_args(literal)[0])
    return names


@pytest.mark.parametrize(
    ("label", "payload", "expected"), GA_SAMPLES, ids=[s[0] for s in GA_SAMPLES]
)
def test_ga_sdk_event_decodes(label: str, payload: dict[str, Any], expected: type) -> None:
    GA_CLIENT.validate_python(payload)
    command = decode_wire(payload)
    assert type(command) is expected
    assert command.event_id == payload.get("event_id")
    assert cmd.command_from_realtime(command.to_realtime()) == command


@pytest.mark.parametrize(
    ("label", "payload", "expected"), BETA_SAMPLES, ids=[s[0] for s in BETA_SAMPLES]
)
def test_beta_sdk_event_decodes(label: str, payload: dict[str, Any], expected: type) -> None:
    BETA_CLIENT.validate_python(payload)
    command = decode_wire(payload)
    assert type(command) is expected
    assert command.event_id == payload.get("event_id")
    assert cmd.command_from_realtime(command.to_realtime()) == command


@pytest.mark.parametrize(
    ("adapter", "payload"),
    [(GA_CLIENT, s[1]) for s in GA_SAMPLES] + [(BETA_CLIENT, s[1]) for s in BETA_SAMPLES],
    ids=[f"ga {s[0]}" for s in GA_SAMPLES] + [f"beta {s[0]}" for s in BETA_SAMPLES],
)
def test_rendering_is_still_a_valid_sdk_event(adapter: Any, payload: dict[str, Any]) -> None:
    # Our additions (an append's format and rate, an item's completed defaults) stay within
    # what the SDK's own client event types accept.
    adapter.validate_python(cmd.command_from_realtime(payload).to_realtime())


def test_samples_cover_every_sdk_client_event_type() -> None:
    ga_types = {payload["type"] for _, payload, _ in GA_SAMPLES}
    beta_types = {payload["type"] for _, payload, _ in BETA_SAMPLES}
    assert ga_types == _sdk_type_names(sdk_ga.RealtimeClientEventParam)
    # The beta transcription update is the next test's: it renders as a GA session.update.
    assert beta_types == _sdk_type_names(sdk_beta.RealtimeClientEventParam) - {
        "transcription_session.update"
    }


def test_beta_transcription_session_update_is_a_session_update_of_a_transcription_session() -> None:
    payload = sdk_beta.TranscriptionSessionUpdateParam(
        type="transcription_session.update",
        event_id="t1",
        session={"input_audio_format": "pcm16", "turn_detection": {"type": "server_vad"}},
    )
    BETA_CLIENT.validate_python(payload)
    command = decode_wire(dict(payload))
    assert isinstance(command, cmd.UpdateSession) and command.event_id == "t1"
    assert command.patch["type"] == "transcription"
    assert command.patch["input_audio_format"] == "pcm16"
    assert cmd.command_from_realtime(command.to_realtime()) == command


# ---- what the typed commands carry ------------------------------------------------------


def _sample(samples: list[Any], label: str) -> dict[str, Any]:
    return next(payload for name, payload, _ in samples if name == label)


def test_ga_session_update_keeps_the_patch_as_sent() -> None:
    payload = _sample(GA_SAMPLES, "session.update")
    command = decode_wire(payload)
    assert isinstance(command, cmd.UpdateSession)
    assert command.patch == payload["session"]


def test_ga_append_carries_decoded_pcm16_at_24khz() -> None:
    command = decode_wire(_sample(GA_SAMPLES, "input_audio_buffer.append"))
    assert isinstance(command, cmd.AppendAudio)
    assert command.audio == pcm16_tone()
    assert (command.format, command.sample_rate_hz) == ("pcm16", 24_000)
    assert command.duration_ms == pytest.approx(20.0)
    assert command.is_speech is None
    assert command.hints == {}


def test_ga_response_create_options_are_decoded_not_refused() -> None:
    command = decode_wire(_sample(GA_SAMPLES, "response.create"))
    assert isinstance(command, cmd.CreateResponse)
    assert command.instructions == "Answer in one sentence."
    assert command.max_output_tokens == "inf"
    assert command.voice == "cedar"
    assert command.output_modalities == ("audio",)
    assert command.output_format == AudioFormat("pcm16", 24_000)
    assert command.conversation == "auto"
    assert command.options["tool_choice"] == {"type": "function", "name": "get_weather"}


def test_beta_response_create_options_in_beta_spelling() -> None:
    command = decode_wire(_sample(BETA_SAMPLES, "response.create"))
    assert isinstance(command, cmd.CreateResponse)
    assert command.temperature == pytest.approx(0.9)
    assert command.max_output_tokens == 256
    assert command.voice == "verse"
    assert command.output_modalities == ("text",)
    assert command.output_format == AudioFormat("pcm16", None)
    assert command.conversation == "none"


def test_ga_voice_object_reads_as_its_id() -> None:
    command = cmd.command_from_realtime(
        {"type": "response.create", "response": {"audio": {"output": {"voice": {"id": "v_9"}}}}}
    )
    assert isinstance(command, cmd.CreateResponse)
    assert command.voice == "v_9"


def test_ga_user_item_is_normalised_and_keeps_its_parts() -> None:
    payload = _sample(GA_SAMPLES, "item user")
    command = decode_wire(payload)
    assert isinstance(command, cmd.CreateItem)
    assert command.previous_item_id == "item_prev"
    item = command.item
    assert item["id"].startswith("item_") and len(item["id"]) == 37
    assert (item["object"], item["status"], item["role"]) == ("realtime.item", "completed", "user")
    assert item["content"] == payload["item"]["content"]


def test_ga_truncate_and_delete_fields() -> None:
    truncate = decode_wire(_sample(GA_SAMPLES, "conversation.item.truncate"))
    assert truncate == cmd.TruncateItem(
        event_id="evt_trunc", item_id="item_resp_1", content_index=0, audio_end_ms=1500
    )
    delete = decode_wire(_sample(GA_SAMPLES, "conversation.item.delete"))
    assert delete == cmd.DeleteItem(event_id="evt_del", item_id="item_abc")


def test_ga_response_cancel_keeps_its_response_id() -> None:
    command = decode_wire(_sample(GA_SAMPLES, "response.cancel"))
    assert command == cmd.CancelResponse(event_id="evt_cancel", response_id="resp_123")


def test_stock_commit_leaves_response_creation_to_the_session() -> None:
    # Decision 16: a stock commit neither asks for nor forbids a response.
    command = decode_wire(_sample(GA_SAMPLES, "input_audio_buffer.commit"))
    assert command == cmd.Commit(event_id="evt_commit_1", final=True, create_response=None)


def test_g711_session_formats_in_both_dialects() -> None:
    from omniduplex.protocol.realtime.session import next_input_defaults

    ga_patch = decode_wire(_sample(GA_SAMPLES, "session.update g711"))
    assert isinstance(ga_patch, cmd.UpdateSession)
    defaults = next_input_defaults(None, ga_patch.patch)
    assert defaults.input_format == AudioFormat(G711_ULAW, None)
    assert defaults.input_sample_rate_hz == 8_000
    assert defaults.output_format == AudioFormat(G711_ALAW, None)
    beta_patch = decode_wire(_sample(BETA_SAMPLES, "session.update no vad"))
    assert isinstance(beta_patch, cmd.UpdateSession)
    assert next_input_defaults(None, beta_patch.patch).input_format.name == G711_ALAW


def test_append_after_g711_session_update_uses_8khz() -> None:
    from omniduplex.protocol.realtime.session import next_input_defaults

    defaults = next_input_defaults(None, {"input_audio_format": "g711_ulaw"})
    command = cmd.command_from_realtime(
        {"type": "input_audio_buffer.append", "audio": TONE_B64[:160]}, defaults=defaults
    )
    assert isinstance(command, cmd.AppendAudio)
    assert (command.format, command.sample_rate_hz) == (G711_ULAW, 8_000)
