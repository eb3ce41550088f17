// The talk page: one click, talk, hear the reply, interrupt it, and see what happened.
// Plain ES modules, no build step. Everything the page knows is on `window.omniduplex`
// (counters, items, latencies, errors) so tests and curious users can read it.

import { AudioEngine, MicrophoneError } from "./audio.js";
import { FORMATS, base64ToBytes, bytesToBase64, codecOf, decodeAudio, encodeAudio } from "./codec.js";
import { RealtimeSession } from "./realtime.js";

const $ = (id) => document.getElementById(id);
const KEY_STORAGE = "omniduplex.apiKey";
const SPEECH_RMS = 0.01; // about -40 dBFS: the page's own "someone is talking" level
const ACK_EVERY_MS = 250;
const SPEECH_CUTS = /turn_detected|barge_in|speech/;

const ERROR_HINTS = {
  unauthorized: "The API key was not accepted. Enter the key the server was started with.",
  resource_exhausted: "The server is at its session limit; try again in a moment.",
  unsupported_audio_format: "The server does not accept that audio format; pick another in Settings.",
  unsupported_turn_detection: "The server rejected the turn-detection settings.",
  session_resume_expired: "The session expired while disconnected; press Start to begin a new one.",
  invalid_resume_token: "The server refused to resume the session; press Start to begin a new one.",
  input_backpressure: "The server is receiving audio faster than it can take it.",
  playback_ack_too_late: "A playback report arrived after your next turn (harmless).",
  voice_update_after_audio_unsupported: "The voice cannot change once the assistant has spoken.",
  instructions_update_unsupported: "This model cannot change its instructions mid-session.",
  unsupported_native_response_options: "This model does not support that response option.",
  server_starting: "The server is still starting; try again in a few seconds.",
  route_not_available: "This server does not serve the Realtime API here.",
};

function median(values) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

const fmtMs = (ms) => (ms === null || ms === undefined ? "–" : `${Math.round(ms)} ms`);

class TalkPage {
  constructor() {
    this.audio = new AudioEngine();
    this.session = null;
    this.sessionObject = null;
    this.items = new Map(); // id -> item
    this.order = [];
    this.responses = new Map(); // response id -> {itemId, eos, status, ...}
    this.errors = [];
    this.messages = [];
    this.latencies = { replies: [], interruptions: [] };
    this.counters = {
      appendsSent: 0,
      appendsDropped: 0,
      audioBytesSent: 0,
      eventsReceived: 0,
      audioDeltas: 0,
      transcriptDeltas: 0,
      audioMsReceived: 0,
      audioMsPlayed: 0,
      responses: 0,
      responsesCompleted: 0,
      responsesCancelled: 0,
      interruptions: 0,
      flushedMs: 0,
      underruns: 0,
      acksSent: 0,
      resumes: 0,
      duplicatesDropped: 0,
      errors: 0,
    };
    this.turn = "idle";
    this.connection = "idle";
    this.userSpeaking = false;
    this.awaitingReply = false;
    this.playing = false;
    this.queuedMs = 0;
    this.voiceActive = false;
    this.lastVoiceAt = 0;
    this.localOnsetAt = 0;
    this.pendingEos = null;
    this.speechStartedAt = 0;
    this.pendingInterrupt = null;
    this.flushToken = 0;
    this.lastCommitSeq = 0;
    this.inputCodec = "pcm16";
    this.inputRate = 24000;
    this.outputCodec = "pcm16";
    this.outputRate = 24000;
    this.level = 0;
    this.eventLog = [];
  }

  // ---- settings -------------------------------------------------------------------

  settings() {
    return {
      serverVad: $("server-vad").checked,
      threshold: Number($("vad-threshold").value),
      silenceMs: Number($("vad-silence").value),
      prefixMs: Number($("vad-prefix").value),
      interruptResponse: $("vad-interrupt").checked,
      overlapPolicy: $("overlap-policy").value,
      commitPolicy: $("commit-policy").value,
      voice: $("voice").value.trim(),
      instructions: $("instructions").value.trim(),
      inputFormat: $("input-format").value,
      outputFormat: $("output-format").value,
      chunkMs: Number($("chunk-ms").value),
      jitterMs: Number($("jitter-ms").value),
      micProcessing: $("mic-processing").checked,
    };
  }

  sessionConfig(s = this.settings()) {
    const turnDetection = s.serverVad
      ? {
          type: "server_vad",
          threshold: s.threshold,
          silence_duration_ms: s.silenceMs,
          prefix_padding_ms: s.prefixMs,
          create_response: true,
          interrupt_response: s.interruptResponse,
        }
      : null;
    const config = {
      type: "realtime",
      audio: {
        input: { format: FORMATS[s.inputFormat].wire, turn_detection: turnDetection },
        output: { format: FORMATS[s.outputFormat].wire },
      },
      overlap_policy: s.overlapPolicy,
      playback_commit_policy: s.commitPolicy,
    };
    if (s.voice) {
      config.audio.output.voice = s.voice;
      config.voice = s.voice;
    }
    if (s.instructions) config.instructions = s.instructions;
    return config;
  }

  adoptSession(session) {
    if (!session) return;
    this.sessionObject = session;
    const input = session.audio?.input || {};
    const output = session.audio?.output || {};
    this.inputCodec = codecOf(input.format ?? session.input_audio_format, "pcm16");
    this.inputRate =
      input.format?.rate || input.sample_rate_hz || (this.inputCodec === "pcm16" ? 24000 : 8000);
    this.outputCodec = codecOf(output.format ?? session.output_audio_format, "pcm16");
    this.outputRate =
      output.format?.rate || output.sample_rate_hz || (this.outputCodec === "pcm16" ? 24000 : 8000);
    const chunkMs = this.settings().chunkMs;
    if (this.inputRate !== this.captureRate || chunkMs !== this.captureChunkMs) {
      this.audio.configureCapture(this.inputRate, chunkMs);
      this.captureRate = this.inputRate;
      this.captureChunkMs = chunkMs;
    }
    const caps = session.capabilities || {};
    const notes = [];
    if (caps.supports_response_voice === false) notes.push("voice per response: not supported");
    if (caps.supports_response_instructions === false) notes.push("instructions per response: not supported");
    if (caps.supports_barge_in === false) notes.push("barge-in: not supported");
    $("capabilities").textContent = notes.join(" · ");
    $("session-id").textContent = session.id || "";
  }

  // ---- lifecycle ------------------------------------------------------------------

  async start() {
    this.clearMessages();
    const s = this.settings();
    const apiKey = $("api-key").value.trim();
    this.audio.createContext(); // inside the click: lets audio play without another gesture
    $("start").disabled = true;
    try {
      const ok = await this.preflight(apiKey);
      if (!ok) throw new Error("preflight");
      if (apiKey) localStorage.setItem(KEY_STORAGE, apiKey);
      const format = FORMATS[s.inputFormat];
      this.inputCodec = format.codec;
      this.inputRate = format.rate;
      this.captureRate = this.inputRate;
      this.captureChunkMs = s.chunkMs;
      await this.audio.start({
        processing: s.micProcessing,
        inputRate: this.inputRate,
        chunkMs: s.chunkMs,
        jitterMs: s.jitterMs,
        onChunk: (chunk) => this.onChunk(chunk),
        onPlayback: (msg) => this.onPlayback(msg),
      });
    } catch (err) {
      if (err instanceof MicrophoneError) this.showMessage(err.message, "microphone");
      else if (err.message !== "preflight") this.showMessage(`Could not start: ${err.message}`);
      await this.audio.stop();
      $("start").disabled = false;
      return;
    }
    this.session = new RealtimeSession({ apiKey });
    this.session.addEventListener("state", (e) => this.onState(e.detail));
    this.session.addEventListener("event", (e) => this.onEvent(e.detail));
    this.session.open(this.sessionConfig(s));
    $("stop").disabled = false;
    $("interrupt").disabled = false;
    $("apply").disabled = false;
    $("drop").disabled = false;
    $("commit").hidden = s.serverVad;
    $("commit").disabled = false;
    this.render();
  }

  async preflight(apiKey) {
    const headers = apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
    let response;
    try {
      response = await fetch(new URL("/v1/models", location.href), { headers });
    } catch (err) {
      this.showMessage(`The server cannot be reached: ${err.message}`);
      return false;
    }
    if (response.status === 401) {
      this.showMessage(
        apiKey
          ? "The API key was not accepted. Enter the key the server was started with (Settings → Server)."
          : "This server needs an API key: enter it in Settings → Server, then press Start again.",
        "unauthorized",
      );
      $("api-key").focus();
      return false;
    }
    if (response.ok) {
      const body = await response.json().catch(() => ({}));
      const model = body.data && body.data[0] && body.data[0].id;
      if (model) $("model").textContent = model;
    }
    return true;
  }

  async stop() {
    this.session?.close();
    await this.audio.stop();
    this.playing = false;
    $("start").disabled = false;
    for (const id of ["stop", "interrupt", "apply", "drop", "commit"]) $(id).disabled = true;
    this.render();
  }

  onState({ state, detail }) {
    this.connection = state;
    const pill = $("connection");
    pill.dataset.state = state;
    const labels = {
      connecting: "connecting…",
      open: detail === "resumed" ? "connected (resumed)" : "connected",
      reconnecting: "reconnecting…",
      closed: "closed",
      failed: "disconnected",
    };
    pill.textContent = labels[state] || state;
    pill.title = detail || "";
    this.counters.resumes = this.session?.resumes ?? 0;
    if (state === "reconnecting") this.showMessage(`Connection lost: ${detail}`, "connection", "info");
    if (state === "open" && detail === "resumed") {
      this.dismiss("connection");
      this.showMessage("Reconnected: the session was resumed where it left off.", "connection", "info", 4000);
    }
    if (state === "failed") {
      this.dismiss("connection");
      this.showMessage(detail, "connection");
      this.audio.stop();
      $("start").disabled = false;
      for (const id of ["stop", "interrupt", "apply", "drop", "commit"]) $(id).disabled = true;
    }
    if (state === "closed") {
      this.audio.stop();
      $("start").disabled = false;
      for (const id of ["stop", "interrupt", "apply", "drop", "commit"]) $(id).disabled = true;
    }
    this.render();
  }

  // ---- microphone -----------------------------------------------------------------

  onChunk({ samples, rate, rms }) {
    const now = performance.now();
    this.level = rms;
    if (rms >= SPEECH_RMS) {
      if (!this.voiceActive) {
        this.voiceActive = true;
        this.localOnsetAt = now;
      }
      this.lastVoiceAt = now;
    } else if (this.voiceActive && now - this.lastVoiceAt > 200) {
      this.voiceActive = false;
    }
    if (rate !== this.inputRate) return; // a chunk from before a format change
    const bytes = encodeAudio(samples, this.inputCodec);
    if (this.session?.send({ type: "input_audio_buffer.append", audio: bytesToBase64(bytes) })) {
      this.counters.appendsSent++;
      this.counters.audioBytesSent += bytes.length;
    } else {
      this.counters.appendsDropped++;
    }
    this.renderMeter();
  }

  // ---- server events --------------------------------------------------------------

  onEvent(event) {
    this.counters.eventsReceived++;
    this.counters.duplicatesDropped = this.session?.duplicates ?? 0;
    if (event.type !== "response.output_audio.delta" && event.type !== "response.output_audio_transcript.delta") {
      this.logEvent(event);
    }
    const handler = this.handlers[event.type];
    if (handler) handler.call(this, event);
    this.render();
  }

  get handlers() {
    return {
      "session.created": (e) => {
        this.adoptSession(e.session);
        this.clearMessages("connection");
      },
      "session.updated": (e) => this.adoptSession(e.session),
      "session.resumed": (e) => {
        if (e.session && e.session.audio) this.adoptSession(e.session);
      },
      "session.replaced": () =>
        this.showMessage("This session was taken over by another connection (another tab?).", "connection"),
      "session.closed": (e) => {
        if (e.reason !== "client_close") this.showMessage(`The session ended (${e.reason}).`, "connection");
      },
      "session.expired": (e) => this.showMessage(`The session expired (${e.reason}).`, "connection"),
      "input_audio_buffer.speech_started": (e) => {
        this.userSpeaking = true;
        this.speechStartedAt = performance.now();
        const item = this.upsert(e.item_id, { role: "user", status: "in_progress" });
        item.speaking = true;
        if (this.bargeInOnSpeech() && this.lastPlaying()) this.interrupt("speech");
      },
      "input_audio_buffer.speech_stopped": (e) => {
        this.userSpeaking = false;
        const now = performance.now();
        // End of speech as heard here: the last microphone chunk above the speech level.
        this.pendingEos = this.lastVoiceAt && now - this.lastVoiceAt < 5000 ? this.lastVoiceAt : now;
        const item = this.items.get(e.item_id);
        if (item) item.speaking = false;
      },
      "input_audio_buffer.committed": (e) => {
        this.userSpeaking = false;
        this.lastCommitSeq++;
        const item = this.upsert(e.item_id, { role: "user" });
        item.speaking = false;
        item.committed = true;
        if (this.pendingEos === null) this.pendingEos = performance.now();
        this.awaitingReply = true;
      },
      "input_audio_buffer.cleared": () => {
        this.userSpeaking = false;
      },
      "conversation.item.added": (e) => this.onItem(e.item, e.previous_item_id),
      "conversation.item.created": (e) => this.onItem(e.item, e.previous_item_id),
      "conversation.item.done": (e) => this.onItem(e.item, e.previous_item_id, true),
      "conversation.item.retrieved": (e) => this.onItem(e.item, null, true),
      "conversation.item.input_audio_transcription.delta": (e) => {
        const item = this.upsert(e.item_id, { role: "user" });
        item.text = (item.text || "") + (e.delta || "");
        this.counters.transcriptDeltas++;
      },
      "conversation.item.input_audio_transcription.completed": (e) => {
        const item = this.upsert(e.item_id, { role: "user" });
        item.text = e.transcript || "";
        item.transcribed = true;
      },
      "conversation.item.truncated": (e) => {
        const item = this.items.get(e.item_id);
        if (item) item.serverTruncatedMs = e.audio_end_ms;
      },
      "conversation.item.deleted": (e) => {
        const item = this.items.get(e.item_id);
        if (item) item.deleted = true;
      },
      "response.created": (e) => {
        const id = e.response.id;
        this.counters.responses++;
        this.responses.set(id, {
          id,
          itemId: `item_${id}`,
          eos: this.pendingEos,
          createdAt: performance.now(),
          status: "in_progress",
          commitSeq: this.lastCommitSeq,
        });
        this.pendingEos = null;
        this.awaitingReply = true;
      },
      "response.output_item.added": (e) => {
        const r = this.responses.get(e.response_id);
        if (r && e.item?.id) r.itemId = e.item.id;
        this.onItem(e.item);
      },
      "response.output_audio.delta": (e) => this.onAudioDelta(e),
      "response.output_audio_transcript.delta": (e) => this.appendText(e, e.delta),
      "response.output_text.delta": (e) => this.appendText(e, e.delta),
      "response.output_audio.done": (e) => {
        const r = this.responses.get(e.response_id);
        if (r && !r.flushed) this.audio.end(e.response_id);
      },
      "response.done": (e) => this.onResponseDone(e.response),
      "response.listen": () => {
        this.awaitingReply = false;
      },
      "overlap.decision": (e) => {
        if (e.action === "barge_in") this.serverInterrupt(e.reason || "barge_in");
      },
      "output_audio_buffer.cleared": (e) => {
        if (e.response_id) this.flushResponse(e.response_id, "output_audio_buffer.cleared");
      },
      error: (e) => this.onError(e.error || {}),
    };
  }

  upsert(id, fields) {
    if (!id) id = `local_${this.order.length}`;
    let item = this.items.get(id);
    if (!item) {
      item = { id, role: fields.role || "user", text: "", status: "in_progress", marks: [], playedMs: 0, receivedMs: 0 };
      this.items.set(id, item);
      this.order.push(id);
    }
    Object.assign(item, fields);
    return item;
  }

  onItem(raw, _previous, done = false) {
    if (!raw || !raw.id) return;
    const item = this.upsert(raw.id, { role: raw.role || raw.type });
    if (raw.status) item.status = raw.status;
    const part = (raw.content || [])[0];
    const transcript = part && (part.transcript ?? part.text);
    if (item.role === "user" && transcript) item.text = transcript;
    if (item.role === "assistant" && done && typeof transcript === "string") item.serverTranscript = transcript;
  }

  appendText(e, delta) {
    if (!delta) return;
    const item = this.upsert(e.item_id || `item_${e.response_id}`, { role: "assistant" });
    item.text += delta;
  }

  onAudioDelta(e) {
    const r = this.responses.get(e.response_id);
    if (r && (r.flushed || r.flushRequested)) return; // in flight when the reply was dropped
    const codec = codecOf(e.format, this.outputCodec);
    const rate = e.sample_rate_hz || (codec === "pcm16" ? this.outputRate : 8000);
    const samples = decodeAudio(base64ToBytes(e.delta), codec);
    this.counters.audioDeltas++;
    this.counters.audioMsReceived += (samples.length * 1000) / rate;
    const item = this.upsert(e.item_id || `item_${e.response_id}`, { role: "assistant" });
    item.receivedMs += (samples.length * 1000) / rate;
    item.responseId = e.response_id;
    for (const mark of e.metadata?.audio_text_marks || []) item.marks.push(mark);
    this.audio.play(e.response_id, samples, rate);
  }

  onResponseDone(response) {
    const r = this.responses.get(response.id) || { id: response.id, itemId: `item_${response.id}` };
    this.responses.set(response.id, r);
    r.status = response.status;
    r.reason = response.status_details?.reason;
    this.awaitingReply = false;
    const out = (response.output || [])[0];
    if (out) this.onItem(out, null, true);
    const item = this.items.get(r.itemId);
    if (item) item.status = response.status;
    if (r.retrieveOnDone) this.retrieve(r);
    if (response.status === "completed") {
      this.counters.responsesCompleted++;
      if (!r.flushed) this.audio.end(response.id);
    } else {
      if (response.status === "cancelled") this.counters.responsesCancelled++;
      if (item) item.truncated = true;
      this.flushResponse(response.id, r.reason || response.status);
    }
  }

  onError(error) {
    this.counters.errors++;
    const code = error.code || "error";
    this.errors.push({ code, message: error.message || "", type: error.type, at: Date.now() });
    const hint = ERROR_HINTS[code];
    const text = hint ? `${hint} (${code}: ${error.message})` : `Server error ${code}: ${error.message}`;
    this.showMessage(text, `error-${code}`, code === "playback_ack_too_late" ? "info" : "error", 8000);
  }

  // ---- playback, interruption, acknowledgements -----------------------------------

  onPlayback(msg) {
    const now = performance.now();
    if (msg.type === "started") {
      const r = this.responses.get(msg.id);
      const item = r && this.items.get(r.itemId);
      if (r && !r.firstAudioAt) {
        r.firstAudioAt = now;
        if (r.eos) {
          r.latencyMs = now - r.eos + this.audio.outputLatencyMs;
          this.latencies.replies.push(Math.round(r.latencyMs));
          if (item) item.latencyMs = r.latencyMs;
        }
      }
      this.awaitingReply = false;
    } else if (msg.type === "progress") {
      let total = 0;
      for (const [id, ms] of Object.entries(msg.played)) {
        const r = this.responses.get(id);
        const item = r && this.items.get(r.itemId);
        if (item) item.playedMs = Math.max(item.playedMs, ms);
        if (r) r.playedMs = Math.max(r.playedMs || 0, ms);
        if (r && !r.flushed && ms - (r.ackedMs || 0) >= ACK_EVERY_MS) this.ack(r, ms, false);
      }
      for (const r of this.responses.values()) total += r.playedMs || 0;
      this.counters.audioMsPlayed = total;
      this.counters.underruns = msg.underruns;
      this.playing = msg.playing;
      this.queuedMs = msg.queuedMs;
    } else if (msg.type === "drained") {
      const r = this.responses.get(msg.id);
      if (r) {
        r.playedMs = msg.playedMs;
        r.drained = true;
        this.ack(r, msg.playedMs, false);
        const item = this.items.get(r.itemId);
        if (item) item.playedMs = msg.playedMs;
      }
    } else if (msg.type === "flushed") {
      this.playing = Object.keys(msg.played).length ? false : this.playing;
      const pending = this.pendingInterrupt && msg.token === this.pendingInterrupt.token ? this.pendingInterrupt : null;
      const stopMs = pending ? Math.round(now - pending.startedAt) : null;
      for (const [id, playedMs] of Object.entries(msg.played)) {
        const r = this.responses.get(id);
        if (!r || r.drained || r.flushed) continue;
        const dropped = msg.dropped[id] || 0;
        const heardAll = r.status === "completed" && dropped === 0 && !r.wasCut;
        if (heardAll) continue;
        r.playedMs = playedMs;
        r.flushed = true;
        this.counters.flushedMs += dropped;
        const item = this.items.get(r.itemId);
        if (item) {
          item.playedMs = playedMs;
          item.truncated = true;
          item.cutAtMs = playedMs;
          item.cutBy = msg.reason === "local" ? "you" : SPEECH_CUTS.test(msg.reason) ? "speech" : "server";
          item.cutReason = msg.reason;
          item.stopMs = stopMs;
        }
        this.ack(r, playedMs, true);
      }
      if (pending) {
        this.pendingInterrupt = null;
        this.latencies.interruptions.push(stopMs);
        this.counters.interruptions++;
        pending.after?.(msg);
      }
    }
    this.render();
  }

  ack(r, playedMs, truncate) {
    const item = this.items.get(r.itemId);
    if (!item) return;
    // After the user's next turn the server refuses acks for this reply (too late).
    if (r.commitSeq !== undefined && this.lastCommitSeq > r.commitSeq) return;
    r.ackedMs = playedMs;
    const command = {
      type: "playback.ack",
      item_id: r.itemId,
      response_id: r.id,
      played_ms: Math.round(playedMs),
    };
    if (truncate) command.truncate = true;
    if (this.session?.send(command)) this.counters.acksSent++;
    // Then show what the server's history holds for the cut reply (the heard part), once
    // the reply is in the history: now if it has ended, else at its response.done.
    if (truncate && r.status && r.status !== "in_progress") this.retrieve(r);
    else if (truncate) r.retrieveOnDone = true;
  }

  retrieve(r) {
    r.retrieveOnDone = false;
    this.session?.send({ type: "conversation.item.retrieve", item_id: r.itemId });
  }

  activeResponse() {
    for (const r of [...this.responses.values()].reverse()) {
      if (r.status === "in_progress") return r;
    }
    return null;
  }

  flushResponse(responseId, reason) {
    const r = this.responses.get(responseId);
    if (r && r.flushRequested) return;
    if (r) {
      r.flushRequested = true;
      r.wasCut = true;
    }
    if (!this.pendingInterrupt) {
      // The server cut the reply (someone talked over it): time it from the local onset.
      const recent = this.localOnsetAt && performance.now() - this.localOnsetAt < 3000;
      const startedAt = recent ? this.localOnsetAt : this.speechStartedAt || performance.now();
      if (this.playing || (r && !r.drained && (r.playedMs || 0) > 0)) {
        this.pendingInterrupt = { startedAt, token: ++this.flushToken, kind: reason };
        this.audio.flush(responseId, reason, this.flushToken);
        return;
      }
    }
    this.audio.flush(responseId, reason, ++this.flushToken);
  }

  serverInterrupt(reason) {
    const r = this.activeResponse() || this.lastPlaying();
    if (r) this.flushResponse(r.id, reason);
  }

  lastPlaying() {
    for (const r of [...this.responses.values()].reverse()) {
      if (r.firstAudioAt && !r.drained && !r.flushed) return r;
    }
    return null;
  }

  // Local barge-in: silence the reply now, tell the server exactly what was heard, and
  // stop the response (or, if it had finished generating, just clear its playback).
  // kind "local": the Interrupt button / Esc. kind "speech": the server heard the user
  // start talking over the reply; a response still generating is cancelled by the server
  // itself (server VAD interrupt_response), one already generated only plays here.
  interrupt(kind = "local") {
    const active = this.activeResponse();
    const playing = this.lastPlaying();
    if (kind === "local" ? !active && !playing : !playing) return;
    const token = ++this.flushToken;
    const recentOnset = this.localOnsetAt && performance.now() - this.localOnsetAt < 3000;
    for (const r of [active, playing]) {
      if (r) {
        r.wasCut = true;
        r.flushRequested = true;
      }
    }
    this.pendingInterrupt = {
      startedAt: kind === "speech" && recentOnset ? this.localOnsetAt : performance.now(),
      token,
      kind,
      after: () => {
        if (kind === "local" && active && active.status === "in_progress") {
          this.session?.send({ type: "response.cancel", response_id: active.id });
        } else if (playing && playing.status && playing.status !== "in_progress") {
          this.session?.send({ type: "output_audio_buffer.clear", response_id: playing.id });
        }
      },
    };
    this.audio.flush(kind === "local" ? null : playing.id, kind, token);
  }

  bargeInOnSpeech() {
    const td = this.sessionObject?.audio?.input?.turn_detection ?? this.sessionObject?.turn_detection;
    const policy = this.sessionObject?.overlap_policy;
    return Boolean(td) && td.interrupt_response !== false && policy !== "listen_only";
  }

  commitTurn() {
    if (!this.session?.send({ type: "input_audio_buffer.commit" })) return;
    this.pendingEos = performance.now();
    this.session.send({ type: "response.create" });
  }

  apply() {
    const s = this.settings();
    this.audio.setJitter(s.jitterMs);
    $("commit").hidden = s.serverVad;
    this.session?.send({ type: "session.update", session: this.sessionConfig(s) });
  }

  // ---- view -----------------------------------------------------------------------

  showMessage(text, key = "", kind = "error", ttlMs = 0) {
    if (key) this.dismiss(key);
    const box = document.createElement("div");
    box.className = `message ${kind}`;
    box.dataset.key = key;
    const span = document.createElement("span");
    span.textContent = text;
    const close = document.createElement("button");
    close.textContent = "×";
    close.title = "Dismiss";
    close.onclick = () => box.remove();
    box.append(span, close);
    $("messages").append(box);
    this.messages.push({ key, text, kind, at: Date.now() });
    if (ttlMs) setTimeout(() => box.remove(), ttlMs);
  }

  dismiss(key) {
    for (const el of $("messages").querySelectorAll(".message")) if (el.dataset.key === key) el.remove();
  }

  clearMessages(key) {
    for (const el of $("messages").querySelectorAll(".message")) {
      if (key === undefined || el.dataset.key === key) el.remove();
    }
  }

  logEvent(event) {
    const li = document.createElement("li");
    const seq = event.server_event_seq ? `#${event.server_event_seq} ` : "";
    const extra = event.type === "error" ? ` ${event.error?.code}` : "";
    li.textContent = `${seq}${event.type}${extra}`;
    const list = $("events");
    list.prepend(li);
    while (list.children.length > 200) list.lastChild.remove();
  }

  computeTurn() {
    if (this.connection === "reconnecting") return "reconnecting";
    if (this.connection !== "open") return this.connection === "connecting" ? "connecting" : "idle";
    if (this.playing) return "speaking";
    if (this.userSpeaking) return "user speaking";
    if (this.awaitingReply) return "thinking";
    return "listening";
  }

  renderMeter() {
    const db = this.level > 0 ? 20 * Math.log10(this.level) : -100;
    const pct = Math.max(0, Math.min(100, ((db + 60) / 60) * 100));
    $("meter-bar").style.width = `${pct}%`;
    const thr = ((20 * Math.log10(SPEECH_RMS) + 60) / 60) * 100;
    $("meter-threshold").style.left = `${thr}%`;
  }

  heardText(item) {
    if (!item.truncated) return [item.text, ""];
    const played = item.cutAtMs ?? item.playedMs;
    let chars = 0;
    if (item.marks.length) {
      for (const mark of item.marks) if (mark.audio_end_ms <= played + 1) chars = Math.max(chars, mark.text_chars);
    } else if (item.receivedMs > 0) {
      chars = Math.round((item.text.length * Math.min(played, item.receivedMs)) / item.receivedMs);
    }
    return [item.text.slice(0, chars), item.text.slice(chars)];
  }

  render() {
    this.turn = this.computeTurn();
    const turn = $("turn");
    turn.dataset.turn = this.turn;
    turn.textContent = this.turn;
    $("vad").dataset.active = String(this.userSpeaking);
    const list = $("transcript");
    if (this.order.length) list.querySelector(".hint")?.remove();
    for (const id of this.order) {
      const item = this.items.get(id);
      let li = list.querySelector(`li[data-id="${CSS.escape(id)}"]`);
      if (!li) {
        li = document.createElement("li");
        li.dataset.id = id;
        list.append(li);
      }
      li.className = item.role;
      li.dataset.status = item.status;
      li.dataset.truncated = String(Boolean(item.truncated));
      li.replaceChildren(...this.itemNodes(item));
    }
    const { replies, interruptions } = this.latencies;
    $("lat-reply-last").textContent = fmtMs(replies.at(-1));
    $("lat-reply-med").textContent = fmtMs(median(replies));
    $("lat-reply-n").textContent = replies.length;
    $("lat-int-last").textContent = fmtMs(interruptions.at(-1));
    $("lat-int-med").textContent = fmtMs(median(interruptions));
    $("lat-int-n").textContent = interruptions.length;
    const c = this.counters;
    $("stats").textContent =
      `sent ${c.appendsSent} chunks · heard ${(c.audioMsPlayed / 1000).toFixed(1)} s of ${(c.audioMsReceived / 1000).toFixed(1)} s · ` +
      `${c.responses} replies, ${[...this.items.values()].filter((i) => i.truncated).length} cut · ` +
      `${c.resumes} resumes · buffer ${Math.round(this.queuedMs)} ms`;
  }

  itemNodes(item) {
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = item.role === "assistant" ? "assistant" : "you";
    const nodes = [who];
    if (item.role === "user") {
      const text = document.createElement("span");
      // Words heard so far (deltas) read as provisional until the transcript completes.
      text.className = item.transcribed || !item.text ? "text" : "text partial";
      text.textContent = item.text || (item.speaking ? "…(speaking)" : "(audio)");
      nodes.push(text);
      if (item.committed && !item.transcribed && !item.text) nodes.push(this.badge("no transcript"));
      return nodes;
    }
    const [heard, unheard] = this.heardText(item);
    const heardEl = document.createElement("span");
    heardEl.className = "text";
    heardEl.textContent = heard;
    nodes.push(heardEl);
    if (unheard) {
      const cut = document.createElement("span");
      cut.className = "unheard";
      cut.title = "generated but not played";
      cut.textContent = unheard;
      nodes.push(cut);
    }
    if (item.truncated) {
      const by = { you: " (Interrupt button)", speech: " (talked over)", server: " (by the server)" }[item.cutBy] || "";
      const stop = item.stopMs === null || item.stopMs === undefined ? "" : `, silent in ${item.stopMs} ms`;
      const at = ((item.cutAtMs ?? item.playedMs) / 1000).toFixed(1);
      const cut = this.badge(`interrupted at ${at} s${by}${stop}`, "cut");
      if (item.serverTranscript !== undefined) cut.title = `The server's history keeps: "${item.serverTranscript}"`;
      nodes.push(cut);
    } else if (item.status === "in_progress") {
      nodes.push(this.badge("speaking", "live"));
    }
    if (item.latencyMs) nodes.push(this.badge(`first audio ${Math.round(item.latencyMs)} ms`));
    return nodes;
  }

  badge(text, kind = "") {
    const b = document.createElement("span");
    b.className = `badge ${kind}`;
    b.textContent = text;
    return b;
  }

  // What tests and the console read.
  snapshot() {
    return {
      connection: this.connection,
      turn: this.computeTurn(),
      sessionId: this.session?.sessionId ?? null,
      generation: this.session?.generation ?? 0,
      lastSeq: this.session?.lastSeq ?? 0,
      playing: this.playing,
      queuedMs: this.queuedMs,
      audio: {
        inputCodec: this.inputCodec,
        inputRate: this.inputRate,
        outputCodec: this.outputCodec,
        outputRate: this.outputRate,
        contextRate: this.audio.ctx?.sampleRate ?? null,
      },
      counters: { ...this.counters },
      latencies: { replies: [...this.latencies.replies], interruptions: [...this.latencies.interruptions] },
      errors: [...this.errors],
      messages: [...this.messages],
      items: this.order.map((id) => {
        const item = this.items.get(id);
        const [heard, unheard] = this.heardText(item);
        return {
          id,
          role: item.role,
          status: item.status,
          text: item.text,
          transcribed: Boolean(item.transcribed),
          heard,
          unheard,
          truncated: Boolean(item.truncated),
          cutBy: item.cutBy ?? null,
          playedMs: item.playedMs,
          receivedMs: item.receivedMs,
          serverTranscript: item.serverTranscript ?? null,
        };
      }),
    };
  }
}

function init() {
  for (const select of [$("input-format"), $("output-format")]) {
    for (const [value, format] of Object.entries(FORMATS)) select.add(new Option(format.label, value));
  }
  $("api-key").value = localStorage.getItem(KEY_STORAGE) || "";
  const page = new TalkPage();
  window.omniduplex = page;
  $("start").onclick = () => page.start();
  $("stop").onclick = () => page.stop();
  $("interrupt").onclick = () => page.interrupt();
  $("commit").onclick = () => page.commitTurn();
  $("drop").onclick = () => page.session?.dropSocket();
  $("forget-key").onclick = () => {
    localStorage.removeItem(KEY_STORAGE);
    $("api-key").value = "";
  };
  $("settings").onsubmit = (event) => {
    event.preventDefault();
    page.apply();
  };
  document.addEventListener("keydown", (event) => {
    const typing = ["INPUT", "TEXTAREA", "SELECT"].includes(document.activeElement?.tagName);
    if (event.key === "Escape") page.interrupt();
    if (event.code === "Space" && !typing && !$("commit").hidden && !$("commit").disabled) {
      event.preventDefault();
      page.commitTurn();
    }
  });
  page.renderMeter();
  document.documentElement.dataset.ready = "true";
}

init();
