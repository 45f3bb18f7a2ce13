// The recordings' audio: real WAV files (RIFF, PCM 16-bit, 8 kHz, the telephone
// rate) that the simulated carrier writes for a recording and the simulated
// speech-to-text engine reads back. A recording's file is a sine tone whose pitch
// comes from the recording's id, so the same recording is the same bytes on every
// download while two recordings sound (and hash, and transcribe) differently, and
// whose length is the recording's own duration, capped so a long call stays a
// small file.

import { createHash } from 'node:crypto';

export const SAMPLE_RATE = 8000;
const BITS_PER_SAMPLE = 16;
/** Longer recordings are served cut to this length (1.9 MB mono): the sim's files are for tests, not archives. */
export const MAX_AUDIO_MS = 120_000;
const HEADER_BYTES = 44;

export interface WavInfo {
  sampleRate: number;
  channels: number;
  bitsPerSample: number;
  /** From the data chunk's length, in ms. */
  durationMs: number;
}

/** A tone of `durationMs` (capped at MAX_AUDIO_MS), one channel or two, its pitch chosen by `key`. */
export function toneWav(durationMs: number, channels: 1 | 2, key: string): Buffer {
  const frames = Math.round((Math.min(Math.max(0, durationMs), MAX_AUDIO_MS) / 1000) * SAMPLE_RATE);
  const blockAlign = channels * (BITS_PER_SAMPLE / 8);
  const dataBytes = frames * blockAlign;
  const out = Buffer.alloc(HEADER_BYTES + dataBytes);
  out.write('RIFF', 0, 'ascii');
  out.writeUInt32LE(36 + dataBytes, 4);
  out.write('WAVE', 8, 'ascii');
  out.write('fmt ', 12, 'ascii');
  out.writeUInt32LE(16, 16);
  out.writeUInt16LE(1, 20); // PCM
  out.writeUInt16LE(channels, 22);
  out.writeUInt32LE(SAMPLE_RATE, 24);
  out.writeUInt32LE(SAMPLE_RATE * blockAlign, 28);
  out.writeUInt16LE(blockAlign, 32);
  out.writeUInt16LE(BITS_PER_SAMPLE, 34);
  out.write('data', 36, 'ascii');
  out.writeUInt32LE(dataBytes, 40);
  // 300..1000 Hz per channel: audible, well under the 4 kHz Nyquist limit of 8 kHz audio.
  const digest = createHash('sha256').update(key).digest();
  const pitch = [300 + (digest.readUInt16BE(0) % 700), 300 + (digest.readUInt16BE(2) % 700)];
  const amplitude = 0.3 * 32767;
  for (let f = 0; f < frames; f++) {
    for (let c = 0; c < channels; c++) {
      const sample = Math.round(amplitude * Math.sin((2 * Math.PI * pitch[c]! * f) / SAMPLE_RATE));
      out.writeInt16LE(sample, HEADER_BYTES + f * blockAlign + c * 2);
    }
  }
  return out;
}

/**
 * The format of a PCM WAV file, walking its chunks (fmt before data, others
 * skipped); null for anything that is not one (an MP3, a truncated header).
 */
export function readWav(bytes: Buffer): WavInfo | null {
  if (bytes.length < 12 || bytes.toString('ascii', 0, 4) !== 'RIFF' || bytes.toString('ascii', 8, 12) !== 'WAVE') {
    return null;
  }
  let fmt: Omit<WavInfo, 'durationMs'> | null = null;
  let pos = 12;
  while (pos + 8 <= bytes.length) {
    const id = bytes.toString('ascii', pos, pos + 4);
    const size = bytes.readUInt32LE(pos + 4);
    const body = pos + 8;
    if (id === 'fmt ') {
      if (size < 16 || body + 16 > bytes.length) return null;
      const format = bytes.readUInt16LE(body);
      const channels = bytes.readUInt16LE(body + 2);
      const sampleRate = bytes.readUInt32LE(body + 4);
      const bitsPerSample = bytes.readUInt16LE(body + 14);
      if (format !== 1 || channels < 1 || sampleRate < 1 || bitsPerSample < 8 || bitsPerSample % 8 !== 0) return null;
      fmt = { sampleRate, channels, bitsPerSample };
    } else if (id === 'data') {
      if (fmt === null) return null;
      // A streamed WAV may claim more data than it holds: what is there is what plays.
      const dataBytes = Math.min(size, bytes.length - body);
      const bytesPerSecond = fmt.sampleRate * fmt.channels * (fmt.bitsPerSample / 8);
      return { ...fmt, durationMs: (dataBytes / bytesPerSecond) * 1000 };
    }
    pos = body + size + (size % 2);
  }
  return null;
}
