"""Out-of-band responses (``response.conversation: "none"``, ``response.input``,
``response.metadata``) as OpenAI documents them, through the unmodified ``openai`` SDK.

On ``cascade-rules`` (its responder answers the text it is given, by rule) the answer
shows which context a response was built from; on ``loopback`` the output modalities and
the events. Every event received is validated with the SDK's union of its dialect.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import openai.types.beta.realtime as beta_types
import openai.types.realtime as ga_types
import orjson
import pydantic
import pytest
from openai import AsyncOpenAI
from server_harness import TIMEOUT_S, b64, run_server, sine_pcm16

GA = pydantic.TypeAdapter(ga_types.RealtimeServerEvent)
BETA = pydantic.TypeAdapter(beta_types.RealtimeServerEvent)
# Our own events, outside OpenAI's unions (test_realtime_openai_sdk.py lists them all).
OURS = {"response.listen", "response.speak", "turn.event", "playback.acknowledged"}
CONVERSATION_EVENTS = (
    "conversation.item.added",
    "conversation.item.created",
    "conversation.item.done",
)
AUDIO_DELTAS = ("response.output_audio.delta", "response.audio.delta")
# cascade-rules' answers (rule_responder.py) to the texts below.
NAME_ANSWER = "I am omniduplex, a voice assistant."
THANKS_ANSWER = "You're welcome."


def _user_text(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


class Session:
    """One SDK connection: ``send`` through the SDK, ``until`` reads validated events."""

    def __init__(self, conn: Any, dialect: str) -> None:
        self.conn = conn
        self.dialect = dialect
        self.adapter = GA if dialect == "ga" else BETA

    async def until(self, wanted: str) -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        while True:
            event = orjson.loads(await asyncio.wait_for(self.conn.recv_bytes(), TIMEOUT_S))
            if event["type"] not in OURS:
                assert self.adapter.validate_python(event).type == event["type"]
            seen.append(event)
            if event["type"] == wanted:
                return seen
            assert event["type"] != "error", event

    async def error(self) -> dict[str, Any]:
        while True:
            event = orjson.loads(await asyncio.wait_for(self.conn.recv_bytes(), TIMEOUT_S))
            assert self.adapter.validate_python(event).type == event["type"]
            if event["type"] == "error":
                return event["error"]

    def text_only(self) -> dict[str, Any]:
        key = "output_modalities" if self.dialect == "ga" else "modalities"
        return {key: ["text"]}

    async def add_user_text(self, text: str) -> str:
        await self.conn.conversation.item.create(item=_user_text(text))
        wanted = "conversation.item.done" if self.dialect == "ga" else "conversation.item.created"
        return (await self.until(wanted))[-1]["item"]["id"]

    async def respond(self, **response: Any) -> list[dict[str, Any]]:
        await self.conn.response.create(response=response)
        events = await self.until("response.done")
        # From the response's start: events before it tell of the input (a commit's item).
        return events[_types(events).index("response.created") :]


@asynccontextmanager
async def connect(server: Any, dialect: str, model: str) -> AsyncIterator[Session]:
    if dialect == "ga":
        client = AsyncOpenAI(api_key="unused", base_url=server.http_url + "/v1")
        connection = client.realtime.connect(model=model)
        update: dict[str, Any] = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
    else:
        client = AsyncOpenAI(api_key="unused", websocket_base_url=server.ws_url.rsplit("/", 1)[0])
        connection = client.beta.realtime.connect(model=model)
        update = {"turn_detection": None}
    async with connection as conn:
        session = Session(conn, dialect)
        await session.until("session.created")
        await conn.session.update(session=update)  # type: ignore[arg-type]
        await session.until("session.updated")
        yield session


def _answer(events: list[dict[str, Any]]) -> str:
    done = events[-1]["response"]
    parts = done["output"][0]["content"]
    return "".join(part.get("text") or part.get("transcript") or "" for part in parts)


def _types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


@pytest.fixture(scope="module")
def rules():
    with run_server("cascade-rules") as running:
        yield running


@pytest.fixture(scope="module")
def loopback():
    with run_server("loopback") as running:
        yield running


@pytest.mark.parametrize("dialect", ["ga", "beta"])
async def test_input_items_are_the_whole_context_and_the_conversation_is_untouched(
    rules: Any, dialect: str
) -> None:
    async with connect(rules, dialect, "cascade-rules") as session:
        thanks_id = await session.add_user_text("thank you")
        classify = {"purpose": "classify", "turn": "1"}
        events = await session.respond(
            conversation="none",
            metadata=classify,
            input=[_user_text("what is your name")],
            **session.text_only(),
        )
        # The inline item is what was answered, not the conversation's pending "thank you".
        assert _answer(events) == NAME_ANSWER
        assert not set(_types(events)) & {*CONVERSATION_EVENTS, *AUDIO_DELTAS}
        assert "response.output_item.added" in _types(events)
        created, done = events[0]["response"], events[-1]["response"]
        assert created["metadata"] == classify
        assert {k: done["metadata"][k] for k in classify} == classify
        out_of_band_id = done["output"][0]["id"]
        # The out-of-band item is not in the conversation.
        await session.conn.conversation.item.retrieve(item_id=out_of_band_id)
        assert (await session.error())["code"] == "item_not_found"
        # A reference names a conversation item as the context.
        events = await session.respond(
            conversation="none", input=[{"type": "item_reference", "id": thanks_id}]
        )
        assert _answer(events) == THANKS_ANSWER
        # The conversation's own response still answers the user's pending turn, from
        # a history without the out-of-band items, and its item joins the conversation.
        events = await session.respond(**session.text_only())
        assert _answer(events) == THANKS_ANSWER
        assert "conversation.item.created" in _types(events)
        in_conversation_id = events[-1]["response"]["output"][0]["id"]
        await session.conn.conversation.item.retrieve(item_id=in_conversation_id)
        retrieved = (await session.until("conversation.item.retrieved"))[-1]["item"]
        assert retrieved["id"] == in_conversation_id


@pytest.mark.parametrize("dialect", ["ga", "beta"])
async def test_an_empty_input_is_no_context(rules: Any, dialect: str) -> None:
    async with connect(rules, dialect, "cascade-rules") as session:
        await session.add_user_text("what is your name")
        events = await session.respond(conversation="none", input=[], **session.text_only())
        # Nothing to answer: the responder speaks first, as it does with no history.
        assert _answer(events) == "Hello! How can I help you?"


@pytest.mark.parametrize("dialect", ["ga", "beta"])
async def test_out_of_band_text_only_on_loopback(loopback: Any, dialect: str) -> None:
    async with connect(loopback, dialect, "loopback") as session:
        pcm = sine_pcm16(600)
        await session.conn.input_audio_buffer.append(audio=b64(pcm))
        await session.conn.input_audio_buffer.commit()
        await session.until("input_audio_buffer.committed")
        events = await session.respond(
            conversation="none", metadata={"kind": "summary"}, **session.text_only()
        )
        done = events[-1]["response"]
        assert done["status"] == "completed"
        assert done["metadata"]["kind"] == "summary"
        assert not set(_types(events)) & {*CONVERSATION_EVENTS, *AUDIO_DELTAS}
        # The committed turn was left for the conversation's response, which answers it
        # in the conversation, with audio.
        events = await session.respond()
        assert "conversation.item.created" in _types(events)
        assert set(_types(events)) & set(AUDIO_DELTAS)


BAD_OPTIONS: list[tuple[dict[str, Any], str]] = [
    ({"conversation": "elsewhere"}, "response.conversation"),
    ({"metadata": {"k": 1}}, "response.metadata.k"),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, "response.metadata"),
    ({"metadata": {"k" * 65: "v"}}, "response.metadata"),
    ({"input": "what is your name"}, "response.input"),
    ({"input": [{"type": "item_reference"}]}, "response.input[0].id"),
    ({"input": [{"type": "item_reference", "id": "item_missing"}]}, "response.input[0].id"),
    ({"input": [{"type": "message", "role": "user", "content": "x"}]}, "response.input[0].content"),
]


@pytest.mark.parametrize(("options", "param"), BAD_OPTIONS, ids=[b[1] for b in BAD_OPTIONS])
async def test_a_malformed_out_of_band_request_is_refused_by_name(
    rules: Any, options: dict[str, Any], param: str
) -> None:
    async with connect(rules, "ga", "cascade-rules") as session:
        await session.conn.response.create(response={"conversation": "none", **options})
        error = await session.error()
        assert (error["type"], error["param"]) == ("invalid_request_error", param)
        # The session goes on: a well-formed out-of-band response is answered.
        events = await session.respond(conversation="none", input=[_user_text("thank you")])
        assert _answer(events) == THANKS_ANSWER
