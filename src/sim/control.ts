// The control API under /_sim (JSON, no auth): the same operations as the
// programmatic Simulator, for `handset trigger`, chaos runs in other processes and
// curious humans. It only translates HTTP to Simulator calls.
//
//   GET  /_sim/state                         behaviour, personas, counts, live calls, recent requests, webhooks, drops
//   GET  /_sim/idle                          answers once nothing is pending (long poll)
//   PUT  /_sim/behaviour                     {"duplicateRate":0.5,…} → the whole behaviour; e.g. {"dropRate":0.1,
//                                            "dropRates":{"call.hangup":1},"holdRate":0.2,"holdMinMs":500,
//                                            "holdMaxMs":3000,"answerDelayMs":1500,"lostAnswerRate":0.1,
//                                            "stalledBodyRate":0.1}
//   PUT  /_sim/personas/{number}             {"sms":"delivery_failed","call":{"answerAfterMs":2000},
//                                            "lose":["call.hangup"],"hold":{"call.answered":8000},
//                                            "recording":"error"}
//   PUT  /_sim/numbers/{number}             the account now holds it (GET /v2/phone_numbers finds it)
//   DELETE /_sim/numbers/{number}           the account no longer holds it
//   GET  /_sim/dropped                       {"data":[…]} every event lost for good, with the body it would have had
//   PUT  /_sim/webhook_url                   {"url":"http://…/webhooks/telnyx"} or {"url":null}
//   POST /_sim/inbound/sms                   {"from","to","text","media_urls"?}
//   POST /_sim/inbound/call                  {"from","to"} → {"call_control_id",…}
//   POST /_sim/calls/{call_control_id}/answer
//   POST /_sim/calls/{call_control_id}/hangup {"cause"?}
//   POST /_sim/deliver                       {"body":"<raw envelope>","url"?} → {"status"}
//   PUT  /_sim/down                          {"mode":"refuse"|"error"|"stall"|"up"}: take the carrier's REST API down
//                                            (door.ts) or bring it back
//   POST /_sim/reset
//
// Beside it, recordings.ts serves GET /_sim/recordings/{id}.{wav|mp3}?expires=&signature=,
// the recording files its webhooks point at (signed, not open).

import type { FastifyInstance } from 'fastify';
import { BehaviourError, parseBehaviour } from './behaviour.js';
import { isDoorMode, DOOR_MODES, type DoorMode } from './door.js';
import { isBody, SimInputError } from './fields.js';
import { parsePersona, PersonaError } from './personas.js';
import type { Behaviour } from './behaviour.js';
import type { InboundCall, InboundCallResult } from './calls.js';
import type { InboundSms } from './messages.js';
import type { Persona } from './personas.js';
import type { DroppedEvent } from './webhooks.js';

/** What every simulated carrier's control API drives (Telnyx's and Twilio's alike). */
export interface CommonControls {
  readonly webhookUrl: string | null;
  state(): unknown;
  idle(): Promise<void>;
  setBehaviour(partial: Partial<Behaviour>): Behaviour;
  setPersona(number: string, persona: Persona): void;
  holdsNumber(number: string): boolean;
  addNumber(number: string): void;
  removeNumber(number: string): void;
  setWebhookUrl(url: string | null): void;
  setDown(mode: DoorMode): Promise<void>;
  reset(): void;
}

/** What the Telnyx simulator's control API drives: the simulator's own operations (simulator.ts hands itself in). */
export interface Controls extends CommonControls {
  readonly dropped: readonly DroppedEvent[];
  injectInboundSms(input: InboundSms): { messageId: string; eventId: string };
  injectInboundCall(input: InboundCall): InboundCallResult;
  answer(callControlId: string): void;
  hangup(callControlId: string, cause?: string): void;
  deliver(body: string, url?: string): Promise<number>;
}

export function registerControlApi(app: FastifyInstance, sim: Controls): void {
  void app.register(
    async (c) => {
      registerCommonControls(c, sim);
      c.get('/dropped', async () => ({ data: sim.dropped }));
      c.post('/inbound/sms', async (req) => {
        const b = body(req.body);
        const media = b['media_urls'];
        const result = sim.injectInboundSms({
          from: str(b, 'from'),
          to: str(b, 'to'),
          text: b['text'] === undefined ? '' : str(b, 'text'),
          ...(media === undefined ? {} : { media_urls: media as string[] }),
          ...(b['webhook_url'] === undefined ? {} : { webhook_url: str(b, 'webhook_url') }),
        });
        return { message_id: result.messageId, event_id: result.eventId };
      });
      c.post('/inbound/call', async (req) => {
        const b = body(req.body);
        const result = sim.injectInboundCall({
          from: str(b, 'from'),
          to: str(b, 'to'),
          ...(b['connection_id'] === undefined ? {} : { connection_id: str(b, 'connection_id') }),
          ...(b['webhook_url'] === undefined ? {} : { webhook_url: str(b, 'webhook_url') }),
        });
        return {
          call_control_id: result.callControlId,
          call_leg_id: result.callLegId,
          call_session_id: result.callSessionId,
          event_id: result.eventId,
        };
      });
      c.post<{ Params: { id: string } }>('/calls/:id/answer', async (req) => {
        sim.answer(req.params.id);
        return { result: 'ok' };
      });
      c.post<{ Params: { id: string } }>('/calls/:id/hangup', async (req) => {
        const b = req.body === undefined ? {} : body(req.body);
        sim.hangup(req.params.id, b['cause'] === undefined ? undefined : str(b, 'cause'));
        return { result: 'ok' };
      });
      c.post('/deliver', async (req) => {
        const b = body(req.body);
        const status = await sim.deliver(str(b, 'body'), b['url'] === undefined ? undefined : str(b, 'url'));
        return { status };
      });
    },
    { prefix: '/_sim' },
  );
}

function body(value: unknown): Record<string, unknown> {
  if (!isBody(value)) throw new SimInputError('the body must be a JSON object');
  return value;
}

function str(b: Record<string, unknown>, key: string): string {
  const v = b[key];
  if (typeof v !== 'string') throw new SimInputError(`${key} must be a string`);
  return v;
}

/**
 * The routes every simulated carrier's control API has, under the prefix it is
 * registered at: state, idle, behaviour, down, personas, numbers, the webhook
 * URL, reset; and its error handler (a bad input is a 400 naming what was wrong).
 */
export function registerCommonControls(c: FastifyInstance, sim: CommonControls): void {
  c.setErrorHandler(async (err: Error & { statusCode?: number }, _req, reply) => {
    const input = err instanceof SimInputError || err instanceof BehaviourError || err instanceof PersonaError;
    const status = input ? 400 : (err.statusCode ?? 500);
    return reply.code(status).send({ error: status >= 500 ? 'internal error' : err.message });
  });

  c.get('/state', async () => sim.state());
  c.get('/idle', async () => {
    await sim.idle();
    return { idle: true };
  });
  c.put('/behaviour', async (req) => sim.setBehaviour(parseBehaviour(req.body ?? {})));
  c.put('/down', async (req) => {
    const mode = isBody(req.body) ? req.body['mode'] : undefined;
    if (!isDoorMode(mode)) throw new SimInputError(`mode must be one of ${DOOR_MODES.join(', ')}`);
    await sim.setDown(mode);
    return { mode };
  });
  c.put<{ Params: { number: string } }>('/personas/:number', async (req) => {
    const persona = parsePersona(req.body ?? {});
    sim.setPersona(req.params.number, persona);
    return { number: req.params.number, persona };
  });
  c.put<{ Params: { number: string } }>('/numbers/:number', async (req) => {
    sim.addNumber(req.params.number);
    return { number: req.params.number, held: sim.holdsNumber(req.params.number) };
  });
  c.delete<{ Params: { number: string } }>('/numbers/:number', async (req) => {
    sim.removeNumber(req.params.number);
    return { number: req.params.number, held: sim.holdsNumber(req.params.number) };
  });
  c.put('/webhook_url', async (req) => {
    const url = isBody(req.body) ? req.body['url'] : undefined;
    if (url !== null && typeof url !== 'string') throw new SimInputError('body must be {"url": "http…" | null}');
    sim.setWebhookUrl(url);
    return { webhookUrl: sim.webhookUrl };
  });
  c.post('/reset', async () => {
    sim.reset();
    return { result: 'ok' };
  });
}
