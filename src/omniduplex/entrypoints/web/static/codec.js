// Audio on the wire: base64 of pcm16 little-endian, or of G.711 mu-law / A-law bytes.
// Plain functions on typed arrays; no dependencies.

export function bytesToBase64(bytes) {
  let binary = "";
  const step = 0x8000;
  for (let i = 0; i < bytes.length; i += step) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + step));
  }
  return btoa(binary);
}

export function base64ToBytes(text) {
  const binary = atob(text);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

export function floatToPcm16(samples) {
  const out = new Int16Array(samples.length);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    out[i] = s < 0 ? s * 0x8000 : s * 0x7fff;
  }
  return new Uint8Array(out.buffer);
}

export function pcm16ToFloat(bytes) {
  const count = bytes.length >> 1;
  const view = new DataView(bytes.buffer, bytes.byteOffset, count * 2);
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = view.getInt16(i * 2, true) / 32768;
  return out;
}

// ITU-T G.711, the classic segment encoders (as audioop / the server's numpy table).
const ULAW_SEGMENT_ENDS = [0x3f, 0x7f, 0xff, 0x1ff, 0x3ff, 0x7ff, 0xfff, 0x1fff];

function linearToUlaw(sample) {
  let pcm = Math.max(-32768, Math.min(32767, Math.round(sample * 32767))) >> 2;
  let mask = 0xff;
  if (pcm < 0) {
    pcm = -pcm;
    mask = 0x7f;
  }
  pcm = Math.min(pcm, 8159) + 33;
  let seg = 0;
  while (seg < 8 && pcm > ULAW_SEGMENT_ENDS[seg]) seg++;
  if (seg >= 8) return 0x7f ^ mask;
  return ((seg << 4) | ((pcm >> (seg + 1)) & 0x0f)) ^ mask;
}

function ulawToLinear(byte) {
  const u = ~byte & 0xff;
  const exponent = (u >> 4) & 0x07;
  const magnitude = ((((u & 0x0f) << 3) + 0x84) << exponent) - 0x84;
  return ((u & 0x80) ? -magnitude : magnitude) / 32768;
}

function linearToAlaw(sample) {
  let pcm = Math.max(-32768, Math.min(32767, Math.round(sample * 32767)));
  const sign = pcm >= 0 ? 0x80 : 0;
  if (pcm < 0) pcm = -pcm - 1;
  let byte;
  if (pcm < 256) {
    byte = pcm >> 4;
  } else {
    let exponent = 1;
    while (pcm >= 512 << (exponent - 1) && exponent < 7) exponent++;
    byte = (exponent << 4) | ((pcm >> (exponent + 3)) & 0x0f);
  }
  return (byte | sign) ^ 0x55;
}

function alawToLinear(byte) {
  const a = byte ^ 0x55;
  const exponent = (a >> 4) & 0x07;
  let magnitude = (a & 0x0f) << 4;
  magnitude = exponent === 0 ? magnitude + 8 : (magnitude + 0x108) << (exponent - 1);
  return ((a & 0x80) ? magnitude : -magnitude) / 32768;
}

const ULAW_DECODE = Float32Array.from({ length: 256 }, (_, i) => ulawToLinear(i));
const ALAW_DECODE = Float32Array.from({ length: 256 }, (_, i) => alawToLinear(i));

// The formats the page offers: wire object for the GA session, codec, sample rate.
export const FORMATS = {
  "pcm16-24000": { label: "PCM16 24 kHz", wire: { type: "audio/pcm", rate: 24000 }, codec: "pcm16", rate: 24000 },
  "pcm16-16000": { label: "PCM16 16 kHz", wire: { type: "audio/pcm", rate: 16000 }, codec: "pcm16", rate: 16000 },
  "pcmu-8000": { label: "G.711 mu-law 8 kHz", wire: { type: "audio/pcmu" }, codec: "g711_ulaw", rate: 8000 },
  "pcma-8000": { label: "G.711 A-law 8 kHz", wire: { type: "audio/pcma" }, codec: "g711_alaw", rate: 8000 },
};

export function encodeAudio(samples, codec) {
  if (codec === "g711_ulaw") return Uint8Array.from(samples, linearToUlaw);
  if (codec === "g711_alaw") return Uint8Array.from(samples, linearToAlaw);
  return floatToPcm16(samples);
}

export function decodeAudio(bytes, codec) {
  if (codec === "g711_ulaw") return Float32Array.from(bytes, (b) => ULAW_DECODE[b]);
  if (codec === "g711_alaw") return Float32Array.from(bytes, (b) => ALAW_DECODE[b]);
  return pcm16ToFloat(bytes);
}

// The codec of a delta: its own `format` (Tier 2) or the session's output format.
export function codecOf(format, fallback) {
  const name = typeof format === "string" ? format : format && format.type;
  if (!name) return fallback;
  if (/ulaw|pcmu|mulaw/.test(name)) return "g711_ulaw";
  if (/alaw|pcma/.test(name)) return "g711_alaw";
  return "pcm16";
}
