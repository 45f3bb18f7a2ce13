// Reads a carrier webhook's body, up to a limit, into the bytes its signature is
// checked over. A body over the limit is refused as soon as its content-length
// or its running size says so, before the rest is read. A body that arrives in
// one piece (a Telnyx webhook, a few kilobytes) is used as it came.
//
// A body that arrives in pieces is held as a latin1 string (one byte per
// character, so the bytes come back exactly) until its last byte, not as
// Buffers. Why: a sender that stalls one byte short keeps what it sent in memory
// until the request timeout. Buffers live in the C heap, which a crowd of such
// senders grows and which then keeps the memory; strings live in V8's heap, which
// returns its pages after collection, and allocating them keeps the young
// collections frequent enough that the HTTP parser's own copy of each piece (a
// Buffer) is freed at once. Measured on `handset serve --roles ingest`, 256
// connections each stalling 1 KiB short of 256 KiB, resident memory at rest about
// 92 MB: Buffers peaked at 160 MB and kept 135-141 MB (the C heap 64-69 MB of
// it); a resizable ArrayBuffer per body, shrunk when cut off, peaked at 190 MB
// and kept 109-124 MB (C heap 35 MB); latin1 strings peaked at 173-182 MB and
// were back to 78-85 MB within 20-40 s (C heap 7-12 MB).

import type { IncomingMessage } from 'node:http';
import { errorCodes } from 'fastify';

export function readBody(stream: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(stream.headers['content-length']);
  if (declared > limit) return Promise.reject(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE());
  return new Promise((resolve, reject) => {
    let whole: Buffer | null = null;
    let held = '';
    let size = 0;
    const settle = (err: Error | null) => {
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
      if (size === declared && held === '') whole = chunk;
      else held += chunk.toString('latin1');
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
