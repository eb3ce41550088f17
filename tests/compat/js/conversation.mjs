// The spoken conversation every JavaScript driver holds, written against a small seam so the
// `openai` package and the Agents SDK run the same steps through their own APIs:
//   client.log             an EventLog of the raw server events the library delivered
//   client.sendAudio(buf)  one pcm16 chunk, as the library sends microphone audio
//   client.truncate(...)   what the library does when playback stops early (the Agents SDK
//                          truncates by itself when speech starts over a reply)
// Turn 1: a spoken question answered to the end (reply audio, both transcripts). Turn 2: the
// question again, talked over while its reply plays; the reply must end `cancelled`, its item
// is truncated at what was heard, and the talk-over is answered.

import { Microphone, ofType, pcmMs, sleep } from './common.mjs';

class Player {
  constructor() {
    this.started = null;
    this.receivedMs = 0;
  }

  feed(bytes) {
    this.started ??= performance.now();
    this.receivedMs += pcmMs(bytes);
  }

  get playedMs() {
    if (this.started === null) return 0;
    return Math.floor(Math.min(this.receivedMs, performance.now() - this.started));
  }
}

function responseDone(id) {
  return (e) => e.type === 'response.done' && e.response.id === id;
}

export async function converse(client, report, { question, transcribes }) {
  const { log } = client;
  const players = new Map();
  const audioDelta = ofType('response.output_audio.delta');
  client.onEvent((event) => {
    if (audioDelta(event)) {
      if (!players.has(event.response_id)) players.set(event.response_id, new Player());
      players.get(event.response_id).feed(Buffer.from(event.delta, 'base64').length);
    }
  });
  const mic = new Microphone((chunk) => client.sendAudio(chunk));
  try {
    mic.start();
    let mark = log.length;
    await mic.say(question);
    report.mark('audio_in', (await log.wait(ofType('input_audio_buffer.committed'), mark)) !== null);
    const done = await log.wait(ofType('response.done'), mark);
    const heard = done && players.get(done.response.id);
    report.mark('reply_audio', done?.response.status === 'completed' && heard?.receivedMs > 0);
    const said = log.find(ofType('response.output_audio_transcript.done'), mark);
    const asked = log.find(ofType('conversation.item.input_audio_transcription.completed'), mark);
    report.note(`user transcript: ${JSON.stringify(asked?.transcript ?? null)}`);
    report.note(`assistant transcript: ${JSON.stringify(said?.transcript ?? null)}`);
    report.mark('transcripts', Boolean(said?.transcript) && (!transcribes || Boolean(asked?.transcript)));

    mark = log.length;
    await mic.say(question);
    const first = await log.wait(audioDelta, mark);
    report.mark('interruption', first !== null && (await interrupt(client, mic, players, first, question)));
  } finally {
    mic.stop();
  }
}

async function interrupt(client, mic, players, first, question) {
  const { log } = client;
  const mark = log.events.indexOf(first);
  const ended = responseDone(first.response_id);
  await sleep(300); // the user hears the start of it
  const active = log.find(ended, mark) === null;
  const talkOver = mic.say(question);
  if ((await log.wait(ofType('input_audio_buffer.speech_started'), mark)) === null) return false;
  const player = players.get(first.response_id);
  const heardMs = player.playedMs;
  let cancelled = true;
  if (active) cancelled = (await log.wait(ended, mark))?.response.status === 'cancelled';
  await client.truncate({ itemId: first.item_id, contentIndex: first.content_index, audioEndMs: heardMs });
  const truncated = await log.wait((e) => e.type === 'conversation.item.truncated' && e.item_id === first.item_id, mark);
  await talkOver;
  const after = await log.wait(
    (e) => e.type === 'response.done' && e.response.id !== first.response_id && e.response.status === 'completed',
    mark,
  );
  return cancelled && truncated !== null && after !== null && (active || heardMs < player.receivedMs);
}
