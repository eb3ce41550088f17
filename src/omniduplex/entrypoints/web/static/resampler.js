// A streaming windowed-sinc resampler for the audio worklets (any rate to any rate).
// The low-pass sits just under the lower Nyquist, so downsampling does not alias;
// kernels come from a table of fractional phases, so no trigonometry per sample.

const PHASES = 256;

export class StreamResampler {
  constructor(inRate, outRate, zeroCrossings = 10) {
    this.inRate = inRate;
    this.outRate = outRate;
    this.identity = inRate === outRate;
    if (this.identity) return;
    this.step = inRate / outRate;
    const ratio = Math.min(1, outRate / inRate);
    const cutoff = 0.45 * ratio; // cycles per input sample (0.5 = input Nyquist)
    this.half = Math.ceil(zeroCrossings / ratio);
    const taps = 2 * this.half;
    this.table = new Float32Array((PHASES + 1) * taps);
    for (let p = 0; p <= PHASES; p++) {
      const frac = p / PHASES;
      let sum = 0;
      for (let k = 0; k < taps; k++) {
        const x = k - (this.half - 1) - frac; // distance of tap from the output instant
        const arg = 2 * cutoff * x;
        const sinc = x === 0 ? 1 : Math.sin(Math.PI * arg) / (Math.PI * arg);
        const w = 0.42 + 0.5 * Math.cos((Math.PI * x) / this.half) + 0.08 * Math.cos((2 * Math.PI * x) / this.half);
        const v = Math.abs(x) >= this.half ? 0 : sinc * w;
        this.table[p * taps + k] = v;
        sum += v;
      }
      for (let k = 0; k < taps; k++) this.table[p * taps + k] /= sum; // unity gain at DC
    }
    this.buf = new Float32Array(this.half); // leading zeros: history for the first outputs
    this.pos = this.half - 1;
  }

  process(input) {
    if (this.identity) return Float32Array.from(input);
    const buf = new Float32Array(this.buf.length + input.length);
    buf.set(this.buf);
    buf.set(input, this.buf.length);
    const taps = 2 * this.half;
    const capacity = Math.max(0, Math.ceil((buf.length - this.half - this.pos) / this.step) + 1);
    const out = new Float32Array(capacity);
    let n = 0;
    let pos = this.pos;
    while (Math.floor(pos) + this.half < buf.length && n < capacity) {
      const base = Math.floor(pos);
      const phase = Math.round((pos - base) * PHASES);
      const row = phase * taps;
      const start = base - (this.half - 1);
      let acc = 0;
      for (let k = 0; k < taps; k++) acc += buf[start + k] * this.table[row + k];
      out[n++] = acc;
      pos += this.step;
    }
    const keep = Math.max(0, Math.floor(pos) - (this.half - 1));
    this.buf = buf.slice(keep);
    this.pos = pos - keep;
    return out.subarray(0, n);
  }
}
