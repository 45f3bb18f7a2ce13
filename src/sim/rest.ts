// The carrier's REST face under /v2, what our workers call as if it were
// https://api.telnyx.com/v2: Bearer auth, Idempotency-Key on the sends, the
// send-level rumours (latency, 429, 5xx, 4xx refusals, decided before the product
// sees the request; answers delayed, lost or stalled after it acted), and
// Telnyx's error bodies. Every request is recorded in arrival order with its
// command_id and Idempotency-Key, whether it was de-duplicated or replayed, the
// status it got and what became of the answer.
//
//   POST /v2/messages                              send an SMS/MMS          (Idempotency-Key)
//   GET  /v2/messages/{id}                         the message as the carrier knows it now
//   POST /v2/calls                                 dial one leg             (Idempotency-Key, command_id)
//   GET  /v2/calls/{call_control_id}               the leg's call status (kept 10 min after it ended)
//   POST /v2/calls/{call_control_id}/actions/{answer|hangup|bridge|reject|record_start|record_stop}   (command_id)
//   GET  /v2/recordings                           saved recordings, by Telnyx's filters, paged
//   GET  /v2/recordings/{recording_id}            a saved recording, with a fresh download URL
//   POST /v2/ai/audio/transcriptions              speech to text (OpenAI-compatible, multipart; its own error shape)
//   GET  /v2/phone_numbers?filter[phone_number]=…  the account's numbers (inventory.ts)
//
// A send goes: Idempotency-Key (a stored success is replayed before anything
// else, so a replay of a success is a success whatever the knobs say), then the
// injected 429/5xx (nothing done), then the product, then the answer's fate.

import type { ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { retryAfterSeconds } from './behaviour.js';
import type { Account } from './account.js';
import type { CallControl } from './calls.js';
import type { Inventory } from './inventory.js';
import { isBody, isRefusal } from './fields.js';
import { IDEMPOTENCY_KEY, IdempotencyRecords, type Claim } from './idempotency.js';
import type { Messaging } from './messages.js';
import type { Recordings } from './recordings.js';
import { errorBody, refuse, type Outcome, type Refusal } from './refusals.js';
import type { Transcriber } from './transcription.js';

/** What became of an answer: sent as usual, sent late, lost with its connection, or cut off mid-body. */
export type AnswerFate = 'sent' | 'delayed' | 'lost' | 'stalled';

export interface RequestRecord {
  seq: number;
  /** Wall-clock ISO time the request arrived. */
  at: string;
  method: string;
  path: string;
  /** The parsed JSON body, or null. */
  body: unknown;
  commandId: string | null;
  /** A repeated command_id within 60 s: answered as the first one, nothing done. */
  deduplicated: boolean;
  /** The Idempotency-Key header as sent (even a malformed one), or null. */
  idempotencyKey: string | null;
  /** A stored answer replayed for its Idempotency-Key: nothing done. */
  replayed: boolean;
  /** The status the carrier decided on (for a lost or stalled answer, one the client never got); null till then. */
  status: number | null;
  answer: AnswerFate;
}

export interface CarrierApiCounts {
  /** Sends answered from an Idempotency-Key record. */
  replays: number;
  answersDelayed: number;
  answersLost: number;
  bodiesStalled: number;
  /**
   * The most messages taken in one wall-clock second (by arrival; replays not
   * counted), from every number together and per sending number: what a number's
   * sending rate bounds.
   */
  busiestSecond: number;
  busiestSecondByNumber: Record<string, number>;
}

export interface CarrierApi {
  readonly counts: Readonly<CarrierApiCounts>;
  /** reset(): forgets the Idempotency-Key records and cuts the answers left stalled. */
  forget(): void;
}

export interface CarrierApiDeps {
  apiKey: string;
  account: Account;
  messaging: Messaging;
  calls: CallControl;
  recordings: Recordings;
  transcriber: Transcriber;
  inventory: Inventory;
  /** The request body exactly as it came (Idempotency-Key compares bytes, not JSON). */
  rawBody: (req: FastifyRequest) => string;
  record: (r: Omit<RequestRecord, 'seq'>) => RequestRecord;
}

/** Telnyx's upload limit for speech to text. */
const TRANSCRIPTION_BODY_LIMIT = 100 * 1024 * 1024;
/** The OpenAI-compatible routes answer errors OpenAI's way, the rest Telnyx's. */
const OPENAI_COMPATIBLE = '/v2/ai/';

function emptyCounts(): CarrierApiCounts {
  return {
    replays: 0,
    answersDelayed: 0,
    answersLost: 0,
    bodiesStalled: 0,
    busiestSecond: 0,
    busiestSecondByNumber: {},
  };
}

export function registerCarrierApi(app: FastifyInstance, deps: CarrierApiDeps): CarrierApi {
  const { account, messaging, calls, recordings, transcriber } = deps;
  const records = new WeakMap<FastifyRequest, RequestRecord>();
  const idempotency = new IdempotencyRecords(() => account.scheduler.wallNow());
  const stalled = new Set<ServerResponse>();
  let counts = emptyCounts();
  /** Each sending number's current second (by arrival) and the messages taken from it in that second. */
  const thisSecond = new Map<string, { second: number; taken: number }>();
  const taken = (req: FastifyRequest) => {
    const second = Math.floor(Date.parse(records.get(req)!.at) / 1000);
    const count = (key: string) => {
      const now = thisSecond.get(key);
      const n = now?.second === second ? now.taken + 1 : 1;
      thisSecond.set(key, { second, taken: n });
      return n;
    };
    const from = String((req.body as { from?: unknown } | null)?.from ?? '');
    // Numbers start with '+': the key of every number together cannot be one.
    counts.busiestSecond = Math.max(counts.busiestSecond, count('all'));
    counts.busiestSecondByNumber[from] = Math.max(counts.busiestSecondByNumber[from] ?? 0, count(from));
  };

  const send = <T>(req: FastifyRequest, reply: FastifyReply, outcome: Outcome<T>) => {
    if (!outcome.ok) return refusal(reply, outcome);
    const record = records.get(req);
    if (record && outcome.deduplicated) record.deduplicated = true;
    return reply.code(200).send({ data: outcome.data });
  };

  /** The behaviour's 429 / 5xx for sends, drawn before anything is looked at. */
  const injectedFailure = (): Refusal | null => {
    const b = account.behaviour();
    if (account.random() < b.rateLimitRate) return refuse.rateLimited(retryAfterSeconds(b));
    if (account.random() < b.serverErrorRate) return refuse.serverError(account.random() < 0.5 ? 500 : 503);
    return null;
  };
  const rejects = () => account.random() < account.behaviour().rejectRate;

  /** The request's Idempotency-Key claim; a refusal when the key settles the answer on its own. */
  const claimKey = (req: FastifyRequest, record: RequestRecord): Claim | Refusal | null => {
    const header = req.headers['idempotency-key'];
    if (header === undefined) return null;
    const key = Array.isArray(header) ? header.join(', ') : header;
    record.idempotencyKey = key;
    if (!IDEMPOTENCY_KEY.test(key)) return refuse.badIdempotencyKey();
    const [path = '', query = ''] = req.url.split(/\?(.*)/s);
    const claim = idempotency.claim(`${req.method} ${path}`, key, `${query}\n${deps.rawBody(req)}`);
    if (claim.kind === 'in_flight') return refuse.idempotencyKeyInUse();
    if (claim.kind === 'mismatch') return refuse.idempotencyKeyReused();
    return claim;
  };

  /** A send: its key, the injected failures, the product's work, then the answer and its fate. */
  const carryOut = async <T>(req: FastifyRequest, reply: FastifyReply, run: () => Outcome<T> | Promise<Outcome<T>>) => {
    const record = records.get(req)!;
    const claim = claimKey(req, record);
    if (isRefusal(claim)) return refusal(reply, claim);
    if (claim?.kind === 'replay') {
      record.replayed = true;
      counts.replays++;
      return answer(req, reply, record, claim.answer);
    }
    let outcome: Outcome<T> | null = null;
    try {
      outcome = injectedFailure() ?? (await run());
    } finally {
      if (claim?.kind === 'claimed') {
        if (outcome?.ok) claim.store(outcome.data);
        else claim.release();
      }
    }
    if (!outcome.ok) return refusal(reply, outcome);
    if (outcome.deduplicated) record.deduplicated = true;
    return answer(req, reply, record, outcome.data);
  };

  /** A send's 200, with the fate the behaviour draws for it (drawn first: the seed decides, not the timing). */
  const answer = async (req: FastifyRequest, reply: FastifyReply, record: RequestRecord, data: unknown) => {
    const b = account.behaviour();
    const fate: AnswerFate =
      b.lostAnswerRate > 0 && account.random() < b.lostAnswerRate
        ? 'lost'
        : b.stalledBodyRate > 0 && account.random() < b.stalledBodyRate
          ? 'stalled'
          : b.answerDelayMs > 0
            ? 'delayed'
            : 'sent';
    record.answer = fate;
    record.status = 200;
    if (b.answerDelayMs > 0) {
      counts.answersDelayed++;
      await sleep(b.answerDelayMs);
    }
    const body = JSON.stringify({ data });
    if (fate === 'lost') {
      counts.answersLost++;
      reply.hijack();
      req.raw.socket.destroy();
      return reply;
    }
    if (fate === 'stalled') {
      counts.bodiesStalled++;
      reply.hijack();
      const res = reply.raw;
      res.writeHead(200, { 'content-type': JSON_TYPE, 'content-length': String(Buffer.byteLength(body)) });
      res.write(body.slice(0, Math.floor(body.length / 2)));
      stalled.add(res);
      res.on('close', () => stalled.delete(res));
      return reply;
    }
    return reply.code(200).type(JSON_TYPE).send(body);
  };

  void app.register(
    async (v2) => {
      v2.addHook('onRequest', async (req) => {
        const record = deps.record({
          at: new Date(account.scheduler.wallNow()).toISOString(),
          method: req.method,
          path: req.url,
          body: null,
          commandId: null,
          deduplicated: false,
          idempotencyKey: null,
          replayed: false,
          status: null,
          answer: 'sent',
        });
        records.set(req, record);
      });
      v2.addHook('preHandler', async (req, reply) => {
        const record = records.get(req);
        if (record) {
          // An upload is kept as what it carried (the transcription route fills it in), not as its bytes.
          record.body = Buffer.isBuffer(req.body) ? null : (req.body ?? null);
          const commandId = isBody(req.body) ? req.body['command_id'] : undefined;
          record.commandId = typeof commandId === 'string' ? commandId : null;
        }
        const latency = account.behaviour().sendLatencyMs;
        if (latency > 0) await sleep(latency);
        if (req.headers.authorization !== `Bearer ${deps.apiKey}`) {
          if (req.url.startsWith(OPENAI_COMPATIBLE)) {
            return reply.code(401).send({
              error: {
                message: 'Incorrect API key provided.',
                type: 'invalid_request_error',
                param: null,
                code: 'invalid_api_key',
              },
            });
          }
          return refusal(reply, refuse.authentication());
        }
      });
      v2.addHook('onResponse', async (req, reply) => {
        const record = records.get(req);
        if (record) record.status = reply.statusCode;
      });

      v2.post('/messages', async (req, reply) =>
        carryOut(req, reply, async () => {
          const outcome = await messaging.send(req.body, { reject: rejects() });
          if (outcome.ok && !outcome.deduplicated) taken(req);
          return outcome;
        }),
      );

      v2.get<{ Params: { id: string } }>('/messages/:id', async (req, reply) =>
        send(req, reply, messaging.get(req.params.id)),
      );

      v2.post('/calls', async (req, reply) => carryOut(req, reply, () => calls.dial(req.body, { reject: rejects() })));

      // call_control_id carries ':' (v3:…), which the router takes as part of the parameter.
      v2.get<{ Params: { id: string } }>('/calls/:id', async (req, reply) =>
        send(req, reply, calls.status(req.params.id)),
      );

      v2.post<{ Params: { id: string; action: string } }>('/calls/:id/actions/:action', async (req, reply) =>
        send(req, reply, calls.action(req.params.id, req.params.action, req.body)),
      );

      v2.get<{ Querystring: Record<string, string | undefined> }>('/recordings', async (req) =>
        recordings.list(req.query),
      );

      v2.get<{ Params: { id: string } }>('/recordings/:id', async (req, reply) =>
        send(req, reply, recordings.resource(req.params.id)),
      );

      v2.post('/ai/audio/transcriptions', { bodyLimit: TRANSCRIPTION_BODY_LIMIT }, async (req, reply) => {
        const answer = await transcriber.transcribe(req.headers['content-type'], req.body);
        const record = records.get(req);
        if (record) record.body = answer.summary;
        return reply.code(answer.status).type(answer.contentType).send(answer.body);
      });

      v2.get<{ Querystring: Record<string, string | undefined> }>('/phone_numbers', async (req) => {
        const filter = req.query['filter[phone_number]'];
        const found = filter === undefined ? deps.inventory.changes().added : deps.inventory.find(filter);
        const data = found.map((number) => ({
          id: `${number.slice(1)}0`,
          record_type: 'phone_number',
          phone_number: number,
          status: 'active',
          connection_id: account.connectionId,
          messaging_profile_id: account.messagingProfileId,
          tags: [],
        }));
        return {
          data,
          meta: { page_number: 1, page_size: 250, total_pages: 1, total_results: data.length },
        };
      });

      v2.setNotFoundHandler(async (req, reply) => refusal(reply, refuse.notFound(req.url)));
    },
    { prefix: '/v2' },
  );

  return {
    get counts() {
      return { ...counts, busiestSecondByNumber: { ...counts.busiestSecondByNumber } };
    },
    forget() {
      idempotency.clear();
      for (const res of stalled) res.destroy();
      stalled.clear();
      thisSecond.clear();
      counts = emptyCounts();
    },
  };
}

const JSON_TYPE = 'application/json; charset=utf-8';

export function refusal(reply: FastifyReply, r: Refusal) {
  if (r.headers) void reply.headers(r.headers);
  return reply.code(r.status).send(errorBody(r));
}
