// Reads a carrier webhook's body, up to a limit, into the bytes its signature is
// checked over. A body over the limit is refused as soon as its content-length
// or its running size says so, before the rest is read. A body that arrives in
// one piece (a Telnyx webhook, a few kilobytes) is used as it came.
//
// A body that arrives in pieces is held until its last byte, and what all such
// bodies hold together is bounded by the process's budget: the piece that would
// take it over refuses its body at once (503, the carrier retries) instead of
// holding it until the request timeout. Why a budget and not only the connection
// cap: a crowd of senders that each stall one byte short of the body limit would
// otherwise hold cap × limit (64 MiB at the defaults), and what it held comes back
// only when V8 next collects its old space, which an idle process may not do for
// minutes.
//
// Held pieces are a latin1 string (one byte per character, so the bytes come back
// exactly), not Buffers: Buffers live in the C heap, which a crowd of stalled
// senders grows and which then keeps the memory; strings live in V8's heap, which
// returns its pages after collection. Measured on `handset serve --roles ingest`,
// 256 connections each stalling 1 KiB short of 256 KiB with no budget, resident
// memory at rest about 92 MB: Buffers peaked at 160 MB and kept 135-141 MB (the C
// heap 64-69 MB of it); latin1 strings peaked at 173-182 MB and were back to
// 78-85 MB once V8 collected them, 3 s to over 60 s after the cut-off.

import type { IncomingMessage } from 'node:http';
import { errorCodes } from 'fastify';

/** Incomplete bodies of one process may hold this many bytes together: 32 bodies at the default limit. */
export const DEFAULT_HELD_BODY_BUDGET = 8 * 1024 * 1024;

/** What the incomplete bodies of one process hold together, in bytes, against their budget. */
export class HeldBodies {
  held = 0;
  constructor(readonly budget: number) {}
}

/** Refused because the incomplete bodies already hold the process's budget: 503, try again. */
export class HeldBodiesFullError extends Error {
  readonly statusCode = 503;
  constructor() {
    super('incomplete bodies hold their budget');
  }
}

export function readBody(stream: IncomingMessage, limit: number, bodies: HeldBodies): Promise<Buffer> {
  const declared = Number(stream.headers['content-length']);
  if (declared > limit) return Promise.reject(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE());
  return new Promise((resolve, reject) => {
    let whole: Buffer | null = null;
    let held = '';
    let size = 0;
    let counted = 0;
    const settle = (err: Error | null) => {
      bodies.held -= counted;
      counted = 0;
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('error', onError);
      stream.off('close', onClose);
      if (err) reject(err);
      else resolve(whole ?? Buffer.from(held, 'latin1'));
      held = '';
      whole = null;
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) return settle(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE());
      if (size === declared && held === '') {
        whole = chunk;
        return;
      }
      counted += chunk.length;
      bodies.held += chunk.length;
      if (bodies.held > bodies.budget) return settle(new HeldBodiesFullError());
      held += chunk.toString('latin1');
    };
    const onEnd = () => settle(null);
    const onError = (err: Error) => settle(Object.assign(err, { statusCode: 400 }));
    // Cut off (the request timeout, the sender gone) before its end: nobody is left to answer.
    const onClose = () => settle(Object.assign(new Error('request closed before its body ended'), { statusCode: 400 }));
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('error', onError);
    stream.on('close', onClose);
    stream.resume();
  });
}
