// Reply playback with a jitter buffer. Audio arrives per response at the session's
// output rate and is resampled to the context rate on arrival. Playout starts once
// `jitterMs` is buffered (or the response has ended); an underrun rebuffers. `flush`
// drops everything queued at once and reports how much of each response was played,
// so the page can acknowledge exactly what the listener heard.
import { StreamResampler } from "./resampler.js";

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = options.processorOptions || {};
    this.jitterSamples = Math.round((sampleRate * (opts.jitterMs ?? 80)) / 1000);
    this.queue = []; // {id, data, offset}
    this.streams = new Map(); // id -> {resampler, rate, played, queued, started, ended}
    this.buffering = true;
    this.underruns = 0;
    this.lastReport = 0;
    this.port.onmessage = (event) => this.onMessage(event.data);
  }

  stream(id, rate) {
    let s = this.streams.get(id);
    if (!s || (rate && s.rate !== rate)) {
      const played = s ? s.played : 0;
      s = { resampler: new StreamResampler(rate || sampleRate, sampleRate), rate, played, queued: 0, started: s?.started ?? false, ended: false };
      this.streams.set(id, s);
    }
    return s;
  }

  onMessage(msg) {
    if (msg.type === "audio") {
      const s = this.stream(msg.id, msg.rate);
      if (s.flushed) return; // audio still in flight for a dropped response
      const data = s.resampler.process(msg.samples);
      if (data.length) {
        this.queue.push({ id: msg.id, data, offset: 0 });
        s.queued += data.length;
      }
    } else if (msg.type === "end") {
      const s = this.streams.get(msg.id);
      if (s) {
        s.ended = true;
        if (s.queued === 0 && !this.queue.some((c) => c.id === msg.id)) this.drained(msg.id, s);
      }
    } else if (msg.type === "flush") {
      this.flush(msg.id ?? null, msg.reason || "flush", msg.token);
    } else if (msg.type === "jitter") {
      this.jitterSamples = Math.round((sampleRate * msg.jitterMs) / 1000);
    }
  }

  ms(samples) {
    return (samples * 1000) / sampleRate;
  }

  flush(id, reason, token) {
    const dropped = {};
    const keep = [];
    for (const chunk of this.queue) {
      if (id === null || chunk.id === id) {
        dropped[chunk.id] = (dropped[chunk.id] || 0) + chunk.data.length - chunk.offset;
      } else {
        keep.push(chunk);
      }
    }
    this.queue = keep;
    const played = {};
    for (const [sid, s] of this.streams) {
      if (id === null || sid === id) {
        played[sid] = this.ms(s.played);
        s.queued = 0;
        s.ended = true;
        s.flushed = true;
      }
    }
    const droppedMs = {};
    for (const [sid, n] of Object.entries(dropped)) droppedMs[sid] = this.ms(n);
    if (this.queue.length === 0) this.buffering = true;
    this.port.postMessage({ type: "flushed", id, reason, token, played, dropped: droppedMs, time: currentTime });
    this.report(true);
  }

  drained(id, s) {
    if (s.reportedDrain) return;
    s.reportedDrain = true;
    this.port.postMessage({ type: "drained", id, playedMs: this.ms(s.played), time: currentTime });
  }

  process(_inputs, outputs) {
    const output = outputs[0];
    const out = output[0];
    const frames = out.length;
    let queued = 0;
    for (const chunk of this.queue) queued += chunk.data.length - chunk.offset;
    if (this.buffering && this.queue.length) {
      const headEnded = this.streams.get(this.queue[0].id)?.ended;
      if (queued >= this.jitterSamples || headEnded) this.buffering = false;
    }
    let written = 0;
    while (!this.buffering && written < frames && this.queue.length) {
      const chunk = this.queue[0];
      const s = this.streams.get(chunk.id);
      const take = Math.min(frames - written, chunk.data.length - chunk.offset);
      out.set(chunk.data.subarray(chunk.offset, chunk.offset + take), written);
      if (!s.started) {
        s.started = true;
        this.port.postMessage({ type: "started", id: chunk.id, time: currentTime + written / sampleRate });
      }
      chunk.offset += take;
      written += take;
      s.played += take;
      s.queued -= take;
      if (chunk.offset >= chunk.data.length) {
        this.queue.shift();
        if (s.ended && !this.queue.some((c) => c.id === chunk.id)) this.drained(chunk.id, s);
      }
    }
    if (written < frames) {
      out.fill(0, written);
      if (!this.buffering) {
        // Ran dry while playing: an underrun, unless every started response has ended.
        if ([...this.streams.values()].some((st) => st.started && !st.ended)) this.underruns++;
        this.buffering = true;
      }
    }
    this.wasPlaying = written > 0;
    for (let c = 1; c < output.length; c++) output[c].set(out);
    this.report(false);
    return true;
  }

  report(force) {
    if (!force && currentTime - this.lastReport < 0.05) return;
    this.lastReport = currentTime;
    const played = {};
    let queued = 0;
    for (const chunk of this.queue) queued += chunk.data.length - chunk.offset;
    for (const [id, s] of this.streams) if (!s.reportedProgressDone) played[id] = this.ms(s.played);
    for (const [id, s] of this.streams) {
      if (s.ended && s.queued <= 0) {
        if (s.reportedProgressDone && this.streams.size > 16) this.streams.delete(id);
        s.reportedProgressDone = true;
      }
    }
    this.port.postMessage({
      type: "progress",
      played,
      queuedMs: this.ms(queued),
      playing: this.wasPlaying,
      underruns: this.underruns,
      time: currentTime,
    });
  }
}

registerProcessor("omni-playback", PlaybackProcessor);
