// The page's audio graph: microphone -> capture worklet (-> chunks for the wire), and
// playback worklet (jitter buffer) -> speakers. One AudioContext at the device rate.

export class MicrophoneError extends Error {
  constructor(message, name) {
    super(message);
    this.name = name;
  }
}

export function microphoneMessage(err) {
  const name = err && err.name;
  if (!window.isSecureContext) {
    return "The microphone needs a secure page: open this page over https, or at http://localhost.";
  }
  if (name === "NotAllowedError" || name === "SecurityError" || name === "PermissionDeniedError") {
    return "Microphone access was refused. Allow the microphone for this site (the icon at the left of the address bar) and press Start again.";
  }
  if (name === "NotFoundError" || name === "DevicesNotFoundError" || name === "OverconstrainedError") {
    return "No microphone was found. Plug one in (or pick one in the system settings) and press Start again.";
  }
  if (name === "NotReadableError" || name === "TrackStartError" || name === "AbortError") {
    return "The microphone could not be opened: another application may be using it.";
  }
  return `The microphone could not be started: ${err && err.message ? err.message : err}`;
}

export class AudioEngine {
  constructor() {
    this.ctx = null;
    this.stream = null;
    this.capture = null;
    this.playback = null;
  }

  // Call from the click handler: browsers only let a user gesture start audio.
  createContext() {
    this.ctx = new AudioContext({ latencyHint: "interactive" });
    return this.ctx;
  }

  async start({ processing, inputRate, chunkMs, jitterMs, onChunk, onPlayback }) {
    const ctx = this.ctx || this.createContext();
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new MicrophoneError(microphoneMessage({ name: "SecurityError" }), "SecurityError");
    }
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({
        audio: {
          channelCount: 1,
          echoCancellation: processing,
          noiseSuppression: processing,
          autoGainControl: processing,
        },
      });
    } catch (err) {
      throw new MicrophoneError(microphoneMessage(err), err.name || "Error");
    }
    this.stream = stream;
    await ctx.audioWorklet.addModule(new URL("./capture-worklet.js", import.meta.url));
    await ctx.audioWorklet.addModule(new URL("./playback-worklet.js", import.meta.url));
    const source = ctx.createMediaStreamSource(stream);
    this.capture = new AudioWorkletNode(ctx, "omni-capture", {
      processorOptions: { targetRate: inputRate, chunkMs },
    });
    this.capture.port.onmessage = (event) => onChunk(event.data);
    const sink = ctx.createGain();
    sink.gain.value = 0; // keeps the capture node pulled without hearing the microphone
    source.connect(this.capture).connect(sink).connect(ctx.destination);
    this.playback = new AudioWorkletNode(ctx, "omni-playback", {
      numberOfInputs: 0,
      outputChannelCount: [1],
      processorOptions: { jitterMs },
    });
    this.playback.port.onmessage = (event) => onPlayback(event.data);
    this.playback.connect(ctx.destination);
    await ctx.resume();
    return { rate: ctx.sampleRate, track: stream.getAudioTracks()[0] };
  }

  configureCapture(inputRate, chunkMs) {
    this.capture?.port.postMessage({ type: "configure", targetRate: inputRate, chunkMs });
  }

  mute(muted) {
    this.capture?.port.postMessage({ type: "mute", muted });
  }

  play(id, samples, rate) {
    this.playback?.port.postMessage({ type: "audio", id, samples, rate }, [samples.buffer]);
  }

  end(id) {
    this.playback?.port.postMessage({ type: "end", id });
  }

  flush(id, reason, token) {
    this.playback?.port.postMessage({ type: "flush", id, reason, token });
  }

  setJitter(jitterMs) {
    this.playback?.port.postMessage({ type: "jitter", jitterMs });
  }

  get outputLatencyMs() {
    if (!this.ctx) return 0;
    return 1000 * ((this.ctx.baseLatency || 0) + (this.ctx.outputLatency || 0));
  }

  async stop() {
    for (const track of this.stream?.getTracks() || []) track.stop();
    this.stream = null;
    if (this.ctx) await this.ctx.close().catch(() => {});
    this.ctx = null;
    this.capture = null;
    this.playback = null;
  }
}
