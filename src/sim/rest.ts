// The carrier's REST face under /v2, what our workers call as if it were
// https://api.telnyx.com/v2: Bearer auth, the send-level rumours (latency, 429,
// 5xx, 4xx refusals; decided here, before the product sees the request), and
// Telnyx's error bodies. Every request is recorded in arrival order with its
// command_id, whether it was de-duplicated and the status it got.

import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Account } from './account.js';
import type { CallControl } from './calls.js';
import { isBody } from './fields.js';
import type { Messaging } from './messages.js';
import { errorBody, refuse, type Outcome, type Refusal } from './refusals.js';

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
  /** Null while the request is being answered. */
  status: number | null;
}

export interface CarrierApiDeps {
  apiKey: string;
  account: Account;
  messaging: Messaging;
  calls: CallControl;
  record: (r: Omit<RequestRecord, 'seq'>) => RequestRecord;
}

/** What a rate-limited client is told to wait, in seconds. */
const RETRY_AFTER_SECONDS = 1;

export function registerCarrierApi(app: FastifyInstance, deps: CarrierApiDeps): void {
  const { account, messaging, calls } = deps;
  const records = new WeakMap<FastifyRequest, RequestRecord>();

  const send = <T>(req: FastifyRequest, reply: FastifyReply, outcome: Outcome<T>) => {
    if (!outcome.ok) return refusal(reply, outcome);
    const record = records.get(req);
    if (record && outcome.deduplicated) record.deduplicated = true;
    return reply.code(200).send({ data: outcome.data });
  };

  /** The behaviour's 429 / 5xx for sends, drawn before anything is looked at. */
  const injectedFailure = (): Refusal | null => {
    const b = account.behaviour();
    if (account.random() < b.rateLimitRate) return refuse.rateLimited(RETRY_AFTER_SECONDS);
    if (account.random() < b.serverErrorRate) return refuse.serverError(account.random() < 0.5 ? 500 : 503);
    return null;
  };
  const rejects = () => account.random() < account.behaviour().rejectRate;

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
          status: null,
        });
        records.set(req, record);
      });
      v2.addHook('preHandler', async (req, reply) => {
        const record = records.get(req);
        if (record) {
          record.body = req.body ?? null;
          const commandId = isBody(req.body) ? req.body['command_id'] : undefined;
          record.commandId = typeof commandId === 'string' ? commandId : null;
        }
        const latency = account.behaviour().sendLatencyMs;
        if (latency > 0) await sleep(latency);
        if (req.headers.authorization !== `Bearer ${deps.apiKey}`) return refusal(reply, refuse.authentication());
      });
      v2.addHook('onResponse', async (req, reply) => {
        const record = records.get(req);
        if (record) record.status = reply.statusCode;
      });

      v2.post('/messages', async (req, reply) => {
        const failure = injectedFailure();
        if (failure) return refusal(reply, failure);
        return send(req, reply, await messaging.send(req.body, { reject: rejects() }));
      });

      v2.get<{ Params: { id: string } }>('/messages/:id', async (req, reply) => send(req, reply, messaging.get(req.params.id)));

      v2.post('/calls', async (req, reply) => {
        const failure = injectedFailure();
        if (failure) return refusal(reply, failure);
        return send(req, reply, calls.dial(req.body, { reject: rejects() }));
      });

      // call_control_id carries ':' (v3:…), which the router takes as part of the parameter.
      v2.get<{ Params: { id: string } }>('/calls/:id', async (req, reply) => send(req, reply, calls.status(req.params.id)));

      v2.post<{ Params: { id: string; action: string } }>('/calls/:id/actions/:action', async (req, reply) =>
        send(req, reply, calls.action(req.params.id, req.params.action, req.body)),
      );

      v2.setNotFoundHandler(async (req, reply) => refusal(reply, refuse.notFound(req.url)));
    },
    { prefix: '/v2' },
  );
}

export function refusal(reply: FastifyReply, r: Refusal) {
  if (r.headers) void reply.headers(r.headers);
  return reply.code(r.status).send(errorBody(r));
}
