// The inbox as an HTTP endpoint: node:http and Express (req, res), and the
// Fetch API (Request → Response) that Next.js route handlers, Hono, Bun and Deno
// speak. Each reads the raw body, hands it to receive() and answers with the
// outcome's status and a short JSON body. A 500 never says more than
// `handler_failed`: the reason goes to onError, not to the sender.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Handler, Outcome } from './inbox.js';
import type { HeaderBag, RawBody } from './verify.js';

type Receive<N> = (request: { body: RawBody; headers: HeaderBag }, handler: Handler<N>) => Promise<Outcome>;
type OnError = (error: unknown, context: { eventId?: string }) => void;

export type NodeHandler = (req: IncomingMessage, res: ServerResponse) => Promise<void>;
export type FetchHandler = (request: Request) => Promise<Response>;

const DEFAULT_MAX_BODY = 1024 * 1024;

function answer(outcome: Outcome): { status: number; body: string } {
  const body: Record<string, string> = { result: outcome.result };
  if (outcome.eventId) body['event_id'] = outcome.eventId;
  if ('reason' in outcome) body['reason'] = outcome.reason;
  return { status: outcome.status, body: JSON.stringify(body) };
}

function failed(error: unknown, onError: OnError): Outcome {
  onError(error, {});
  return { status: 500, result: 'handler_failed', error };
}

export function nodeHandler<N>(
  receive: Receive<N>,
  handler: Handler<N>,
  options: { maxBodyBytes?: number | undefined; onError: OnError },
): NodeHandler {
  const max = options.maxBodyBytes ?? DEFAULT_MAX_BODY;
  return async (req, res) => {
    let outcome: Outcome;
    let close = false;
    try {
      const body = await rawBody(req, max);
      if (body === TOO_LARGE) {
        outcome = { status: 400, result: 'bad_request', reason: `the body is larger than ${max} bytes` };
        close = true;
      } else {
        outcome = await receive({ body, headers: req.headers }, handler);
      }
    } catch (error) {
      outcome = failed(error, options.onError);
    }
    const { status, body } = answer(outcome);
    if (res.headersSent) return;
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      ...(close ? { connection: 'close' } : {}),
    });
    res.end(body);
  };
}

export function fetchHandler<N>(receive: Receive<N>, handler: Handler<N>, options: { onError: OnError }): FetchHandler {
  return async (request) => {
    let outcome: Outcome;
    try {
      outcome = await receive({ body: await request.arrayBuffer(), headers: request.headers }, handler);
    } catch (error) {
      outcome = failed(error, options.onError);
    }
    const { status, body } = answer(outcome);
    return new Response(body, { status, headers: { 'content-type': 'application/json' } });
  };
}

const TOO_LARGE = Symbol('too large');

/**
 * The bytes as received. A body a framework has already read raw (express.raw(),
 * or a `rawBody` kept by a JSON parser's verify hook) is taken as is; one it has
 * parsed into an object is an error: the exact bytes the signature covers are gone.
 */
async function rawBody(req: IncomingMessage, max: number): Promise<RawBody | typeof TOO_LARGE> {
  const framework = req as IncomingMessage & { body?: unknown; rawBody?: unknown };
  for (const kept of [framework.rawBody, framework.body]) {
    if (typeof kept === 'string' || kept instanceof Uint8Array) return kept;
  }
  // Express 4's parsers set `{}` without reading when the content type is not theirs.
  const untouched = framework.body === undefined || (isEmptyObject(framework.body) && !req.readableEnded);
  if (!untouched || req.readableEnded) {
    throw new TypeError(
      'the request body was already read (a JSON body parser ran before the inbox): mount the inbox before ' +
        "express.json(), or give it the raw body with express.raw({ type: 'application/json' })",
    );
  }
  if (Number(req.headers['content-length'] ?? 0) > max) {
    req.resume();
    return TOO_LARGE;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    // Past the limit the rest is read and dropped, so that the answer can still be sent.
    if (size <= max) chunks.push(chunk as Buffer);
  }
  return size > max ? TOO_LARGE : Buffer.concat(chunks);
}

function isEmptyObject(v: unknown): boolean {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && Object.keys(v).length === 0;
}
