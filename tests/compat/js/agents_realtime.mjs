// The OpenAI Agents SDK for JavaScript (`@openai/agents-realtime`): a RealtimeAgent in a
// RealtimeSession over its Node WebSocket transport, pointed at our URL with `connect({ url })`.
// The SDK sends its own session config on connect; it plays no audio itself (a Node app plays
// the `audio` events), and on talk-over it truncates the reply and emits `audio_interrupted`.
//
// Scenarios: `conversation` (spoken, server_vad, talked over), `tool` (the agent's tool runs
// and the agent speaks its result), `mcp` (a remote MCP server declared with
// `hostedMcpTool`, as the SDK's guide shows: the server lists and calls its tools; with
// `approval`, the app approves the call when the SDK asks).

import { hostedMcpTool } from '@openai/agents-core';
import { RealtimeAgent, RealtimeSession, tool as agentTool } from '@openai/agents-realtime';
import { z } from 'zod';

import { EventLog, RATE, ofType, readPcm, runScenario } from './common.mjs';
import { converse } from './conversation.mjs';

const PCM = { type: 'audio/pcm', rate: RATE };

async function start(options, report, { tools = [], turnDetection = { type: 'server_vad' } } = {}) {
  const agent = new RealtimeAgent({
    name: 'Assistant',
    instructions: 'You are a helpful voice assistant. Answer in one short sentence.',
    tools,
  });
  const session = new RealtimeSession(agent, {
    transport: 'websocket',
    model: options.model,
    config: {
      audio: {
        input: { format: PCM, transcription: { model: 'whisper-1' }, turnDetection },
        output: { format: PCM, voice: 'alloy' },
      },
    },
  });
  const log = new EventLog();
  const listeners = [];
  const interruptions = [];
  session.on('transport_event', (event) => {
    log.add(event);
    for (const listener of listeners) listener(event);
  });
  session.on('audio_interrupted', () => interruptions.push(log.length));
  session.on('error', ({ error }) => {
    const detail = error?.error ?? error;
    report.error(`${detail?.code ?? detail?.name ?? 'error'}: ${detail?.message ?? JSON.stringify(detail)}`);
  });
  await session.connect({ apiKey: 'unused', url: `${options.ws_url}?model=${options.model}` });
  report.mark('connect', (await log.wait(ofType('session.created'))) !== null);
  const updated = await log.wait(ofType('session.updated'));
  report.mark('configure', updated !== null && updated.session.instructions === agent.instructions);
  return {
    session,
    log,
    interruptions,
    onEvent: (listener) => listeners.push(listener),
    sendAudio: (chunk) => session.sendAudio(chunk.buffer.slice(chunk.byteOffset, chunk.byteOffset + chunk.length)),
    truncate: async () => {},
  };
}

async function conversation(options, report) {
  const client = await start(options, report);
  await converse(client, report, { question: readPcm(options.question_pcm), transcribes: options.transcribes });
  report.mark('audio_interrupted', client.interruptions.length > 0);
  client.session.close();
  report.mark('close');
}

async function tool(options, report) {
  const ran = [];
  const checkWeather = agentTool({
    name: options.tool.name,
    description: options.tool.description,
    parameters: z.object({ place: z.string() }),
    execute: async ({ place }) => {
      ran.push(place);
      return JSON.stringify(options.output);
    },
  });
  const client = await start(options, report, { tools: [checkWeather] });
  const { log, session } = client;
  const mark = log.length;
  session.sendMessage(options.ask);
  const calling = await log.wait(ofType('response.done'), mark);
  report.mark('call', calling?.response.output.some((item) => item.type === 'function_call'));
  const answer = await log.wait(
    (e) => e.type === 'response.done' && e.response.output.some((item) => item.type === 'message'),
    mark,
  );
  const spoken = answer?.response.output.find((item) => item.type === 'message')?.content?.[0]?.transcript;
  report.note(`tool ran with: ${JSON.stringify(ran)}; answer: ${JSON.stringify(spoken)}`);
  report.mark('ran', ran.length === 1 && ran[0] === options.ask);
  report.mark('answer', answer?.response.status === 'completed' && Boolean(spoken));
  session.close();
  report.mark('close');
}

async function mcp(options, report) {
  const weather = hostedMcpTool({
    serverLabel: 'weather',
    serverUrl: options.mcp_url,
    requireApproval: options.approval ? 'always' : 'never',
  });
  const client = await start(options, report, { tools: [weather] });
  const { log, session } = client;
  const approvals = [];
  session.on('tool_approval_requested', (_context, _agent, request) => {
    approvals.push(request.type);
    session.approve(request.approvalItem);
  });
  const listed = await log.wait(ofType('mcp_list_tools.completed'));
  await log.wait(ofType('conversation.item.done'));
  report.mark('listed', listed !== null && session.availableMcpTools.some((t) => t.name === options.tool_name));
  const mark = log.length;
  session.sendMessage(options.ask);
  const answer = await log.wait(
    (e) => e.type === 'response.done' && e.response.output.some((item) => item.type === 'mcp_call'),
    mark,
  );
  const call = answer?.response.output.find((item) => item.type === 'mcp_call');
  const spoken = answer?.response.output.find((item) => item.type === 'message')?.content?.[0]?.transcript;
  const history = session.history.filter((item) => item.type === 'mcp_call');
  report.note(`approvals: ${JSON.stringify(approvals)}; output: ${JSON.stringify(call?.output)}; answer: ${JSON.stringify(spoken)}`);
  report.mark('call', Boolean(call?.output) && history.some((item) => item.output === call.output));
  report.mark('approved', options.approval ? approvals.includes('mcp_approval_request') : approvals.length === 0);
  report.mark('answer', answer?.response.status === 'completed' && Boolean(spoken));
  session.close();
  report.mark('close');
}

await runScenario('@openai/agents-realtime', { conversation, tool, mcp });
