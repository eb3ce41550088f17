// Microphone capture: downmix to mono, resample to the session's input rate, and hand
// the page one chunk every `chunkMs` (20-40 ms) with its level for the VAD meter.
import { StreamResampler } from "./resampler.js";

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.configure(options.processorOptions || {});
    this.port.onmessage = (event) => {
      if (event.data.type === "configure") this.configure(event.data);
      if (event.data.type === "mute") this.muted = Boolean(event.data.muted);
    };
  }

  configure({ targetRate = 24000, chunkMs = 20 }) {
    this.targetRate = targetRate;
    this.chunkSamples = Math.round((targetRate * chunkMs) / 1000);
    this.resampler = new StreamResampler(sampleRate, targetRate);
    this.pending = new Float32Array(this.chunkSamples);
    this.filled = 0;
    this.muted = false;
  }

  process(inputs) {
    const channels = inputs[0];
    if (!channels || channels.length === 0) return true;
    const frames = channels[0].length;
    const mono = new Float32Array(frames);
    for (const channel of channels) {
      for (let i = 0; i < frames; i++) mono[i] += channel[i] / channels.length;
    }
    const out = this.resampler.process(mono);
    let offset = 0;
    while (offset < out.length) {
      const take = Math.min(out.length - offset, this.chunkSamples - this.filled);
      this.pending.set(out.subarray(offset, offset + take), this.filled);
      this.filled += take;
      offset += take;
      if (this.filled === this.chunkSamples) this.flushChunk();
    }
    return true;
  }

  flushChunk() {
    const chunk = this.pending;
    let energy = 0;
    let peak = 0;
    for (let i = 0; i < chunk.length; i++) {
      energy += chunk[i] * chunk[i];
      peak = Math.max(peak, Math.abs(chunk[i]));
    }
    const rms = Math.sqrt(energy / chunk.length);
    if (this.muted) chunk.fill(0);
    this.port.postMessage(
      { type: "chunk", samples: chunk, rate: this.targetRate, rms, peak, time: currentTime },
      [chunk.buffer],
    );
    this.pending = new Float32Array(this.chunkSamples);
    this.filled = 0;
  }
}

registerProcessor("omni-capture", CaptureProcessor);
