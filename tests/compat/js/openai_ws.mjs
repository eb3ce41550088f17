// The `openai` npm package's Realtime WebSocket client (`openai/realtime/ws`), as a Node app
// uses it: `new OpenAIRealtimeWS({ model }, new OpenAI({ baseURL }))`. The package always
// connects over wss, so the server it is pointed at serves TLS.
//
// Scenarios: `conversation` (spoken, server_vad, talked over), `tool` (a declared function is
// called, its output answered), `transcription` (a transcription session captions speech).

import { once } from 'node:events';

import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';

import { EventLog, RATE, ofType, readPcm, runScenario, silence } from './common.mjs';
import { converse } from './conversation.mjs';

const INSTRUCTIONS = 'You are a helpful voice assistant. Answer in one short sentence.';
const PCM = { type: 'audio/pcm', rate: RATE };

function connect(options, props, report) {
  const client = new OpenAI({ apiKey: 'unused', baseURL: options.base_url });
  const rt = new OpenAIRealtimeWS(props, client);
  const log = new EventLog();
  const listeners = [];
  rt.on('event', (event) => {
    log.add(event);
    for (const listener of listeners) listener(event);
  });
  rt.on('error', (err) => report.error(`${err.error?.code ?? err.name}: ${err.message}`));
  return {
    rt,
    log,
    onEvent: (listener) => listeners.push(listener),
    sendAudio: (chunk) => rt.send({ type: 'input_audio_buffer.append', audio: chunk.toString('base64') }),
    truncate: ({ itemId, contentIndex, audioEndMs }) =>
      rt.send({ type: 'conversation.item.truncate', item_id: itemId, content_index: contentIndex, audio_end_ms: audioEndMs }),
  };
}

async function open(client, report) {
  await once(client.rt.socket, 'open');
  report.mark('connect', (await client.log.wait(ofType('session.created'))) !== null);
}

async function configure(client, report, session) {
  const mark = client.log.length;
  client.rt.send({ type: 'session.update', session });
  const updated = await client.log.wait(ofType('session.updated'), mark);
  report.mark('configure', updated !== null && report.errors.length === 0);
  return updated;
}

async function close(client, report) {
  const closed = once(client.rt.socket, 'close');
  client.rt.close();
  await closed;
  report.mark('close');
}

async function conversation(options, report) {
  const client = connect(options, { model: options.model }, report);
  await open(client, report);
  await configure(client, report, {
    type: 'realtime',
    instructions: INSTRUCTIONS,
    output_modalities: ['audio'],
    audio: {
      input: { format: PCM, transcription: { model: 'whisper-1' }, turn_detection: { type: 'server_vad' } },
      output: { format: PCM, voice: 'alloy' },
    },
  });
  await converse(client, report, { question: readPcm(options.question_pcm), transcribes: options.transcribes });
  await close(client, report);
}

async function tool(options, report) {
  const client = connect(options, { model: options.model }, report);
  const { log, rt } = client;
  await open(client, report);
  await configure(client, report, { type: 'realtime', tools: [options.tool], tool_choice: 'auto' });
  let mark = log.length;
  rt.send({
    type: 'conversation.item.create',
    item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: options.ask }] },
  });
  rt.send({ type: 'response.create' });
  const calling = await log.wait(ofType('response.done'), mark);
  const call = calling?.response.output.find((item) => item.type === 'function_call');
  report.mark('call', call?.name === options.tool.name);
  report.note(`arguments: ${call?.arguments}`);
  if (!call) return;
  mark = log.length;
  rt.send({
    type: 'conversation.item.create',
    item: { type: 'function_call_output', call_id: call.call_id, output: JSON.stringify(options.output) },
  });
  rt.send({ type: 'response.create' });
  const answer = await log.wait(ofType('response.done'), mark);
  const spoken = answer?.response.output[0]?.content?.[0]?.transcript;
  report.note(`answer: ${JSON.stringify(spoken)}`);
  report.mark('answer', answer?.response.status === 'completed' && Boolean(spoken));
  await close(client, report);
}

async function transcription(options, report) {
  const client = connect(options, { intent: 'transcription' }, report);
  const { log, rt } = client;
  await open(client, report);
  await configure(client, report, {
    type: 'transcription',
    audio: {
      input: {
        format: PCM,
        transcription: { model: 'gpt-4o-transcribe', language: 'en' },
        turn_detection: { type: 'server_vad' },
      },
    },
    include: ['item.input_audio_transcription.logprobs'],
  });
  const mark = log.length;
  const speech = Buffer.concat([silence(300), readPcm(options.question_pcm), silence(1200)]);
  const step = 2 * Math.floor((RATE * 40) / 1000);
  for (let at = 0; at < speech.length; at += step) {
    client.sendAudio(speech.subarray(at, at + step));
    await new Promise((resolve) => setTimeout(resolve, 40));
  }
  const committed = await log.wait(ofType('input_audio_buffer.committed'), mark);
  report.mark('committed', committed !== null);
  const completed = await log.wait(ofType('conversation.item.input_audio_transcription.completed'), mark);
  const deltas = log.events.slice(mark).filter(ofType('conversation.item.input_audio_transcription.delta'));
  report.note(`transcript: ${JSON.stringify(completed?.transcript ?? null)}`);
  report.mark(
    'transcript',
    Boolean(completed?.transcript) && completed.item_id === committed?.item_id && Array.isArray(completed.logprobs),
  );
  report.mark('deltas', deltas.length > 0 && deltas.every((d) => d.item_id === committed?.item_id));
  report.mark('no_response', log.find(ofType('response.created'), mark) === null);
  await close(client, report);
}

await runScenario('openai', { conversation, tool, transcription });
