// `handset trigger <scenario>`: drives the simulator through the real pipeline
// (like `stripe trigger`), so a developer sees exactly-once with their own eyes:
// a real API call or an injected carrier event, the carrier misbehaving if the
// scenario says so, then what Handset made of it and which customer events it
// sent — reported once Handset has finished with it, as the API shows it.
// Needs a running `handset dev` (or --api-url/--api-key and --sim-url).

import { createClient, type Call, type HandsetClient, type Message, type operations } from '@handset/client';
import { Command } from 'commander';
import { nearest, UsageError } from '../cli/command.js';
import { DEMO_RING } from './demo.js';
import { networkReason, resolveApi } from './state.js';

type Out = (line: string) => void;
// biome-ignore lint/suspicious/noExplicitAny: scenarios read the API's JSON loosely, as a script would
type Json = any;

/** What a scenario can be told, beside what it does without. */
const PARAMS = ['from', 'to', 'body', 'carrier', 'mode'] as const;
type Param = (typeof PARAMS)[number];

interface Ctx {
  /** The Handset API, typed from its OpenAPI document (src/client). */
  api: HandsetClient;
  /** The simulator's control API. */
  sim: (method: string, path: string, body?: unknown) => Promise<Json>;
  /** The Twilio simulator's control API. */
  twilioSim: (method: string, path: string, body?: unknown) => Promise<Json>;
  given: Partial<Record<Param, string>>;
  /** Your Handset number: the running dev's demo number. */
  ours: string | null;
  /** Your number at Twilio: the running dev's second demo number. */
  oursAtTwilio: string | null;
  out: Out;
}

/** What a scenario reports (printed as JSON under --json). */
type Summary = Record<string, unknown>;

interface Scenario {
  about: string;
  /** Each parameter it takes, and what it is when not given. */
  takes: Partial<Record<Param, string>>;
  run: (c: Ctx) => Promise<Summary>;
}

const YOUR_NUMBER = 'your number (handset dev’s demo number)';
const GREETING = '"Hello from handset trigger at <time>"';

export const SCENARIOS: Record<string, Scenario> = {
  delivered: {
    about: 'send an SMS that the carrier delivers',
    takes: { from: YOUR_NUMBER, to: '+15555550100, which the simulator delivers', body: GREETING },
    run: async (c) => sendAndFollow(c, '+15555550100', 'delivered'),
  },
  failed: {
    about: 'send an SMS the carrier cannot deliver (error 40008)',
    takes: { from: YOUR_NUMBER, to: '+15555550101, which the simulator cannot deliver', body: GREETING },
    run: async (c) => sendAndFollow(c, '+15555550101', 'failed'),
  },
  'inbound-sms': {
    about: 'someone texts your number',
    takes: { from: 'a random +1415555…', to: YOUR_NUMBER, body: '"Hi! Is this Handset?"' },
    run: async (c) => {
      const from = c.given.from ?? randomNumber();
      const to = ours(c, 'to');
      await c.sim('POST', '/inbound/sms', { from, to, text: c.given.body ?? 'Hi! Is this Handset?' });
      c.out(`The carrier delivered an SMS from ${from} to ${to}.`);
      const found = await waitFor(`an inbound message from ${from}`, async () => {
        const list = await c.api.GET('/v1/messages', { params: { query: { direction: 'inbound', limit: 20 } } });
        return must(list, 'GET /v1/messages').data.find((x) => x.from === from && x.to === to);
      });
      const { message, events } = await messageSettled(c, found.id, ['received']);
      c.out(`Handset made it ${message.id} (status ${message.status}); events: ${events.join(', ')}`);
      return { message: messageSummary(message), events };
    },
  },
  'duplicate-storm': {
    about: 'the carrier repeats itself: every webhook twice, re-sent under new ids, then a contradiction',
    takes: { from: YOUR_NUMBER, to: '+15555550100, which the simulator delivers', body: GREETING },
    run: async (c) => {
      const before = (await c.sim('GET', '/state')).counts;
      const previous = (await c.sim('GET', '/state')).behaviour;
      await c.sim('PUT', '/behaviour', { duplicateRate: 1, resendNewIdRate: 1, contradictionRate: 1 });
      try {
        c.out(
          'The simulator now sends every webhook twice, re-sends each fact under a new event id, ' +
            'and says "delivery_failed" after "delivered".',
        );
        const sent = await sendAndFollow(c, '+15555550100', 'delivered');
        const id = (sent.message as { id: string }).id;
        // The carrier has said everything once it is idle; then Handset must be done with all of it.
        await c.sim('GET', '/idle');
        const after = (await c.sim('GET', '/state')).counts;
        const { history, events } = await messageSettled(c, id, ['delivered', 'failed']);
        const carrier = {
          facts: after.events - before.events,
          webhooks: after.attempts - before.attempts,
          duplicates: after.duplicates - before.duplicates,
          resent_under_new_ids: after.resends - before.resends,
        };
        c.out(
          `The carrier told ${carrier.facts} facts in ${carrier.webhooks} webhooks ` +
            `(${carrier.duplicates} duplicates, ${carrier.resent_under_new_ids} re-sent under new ids).`,
        );
        const refused = (history as { effect: string; carrier_status: string | null }[])
          .filter((h) => h.effect === 'refused')
          .map((h) => h.carrier_status);
        c.out(
          `Handset applied one terminal status and refused ${refused.length} later word(s): ` +
            `${refused.join(', ') || 'none'}.`,
        );
        c.out(`Your endpoint got: ${events.join(', ')} — one event per transition.`);
        return { ...sent, carrier, refused, events };
      } finally {
        await c.sim('PUT', '/behaviour', previous);
      }
    },
  },
  'carrier-down': {
    about: 'take a carrier down (refuse connections, answer 5xx, or stall every answer), or bring it back up',
    takes: { carrier: 'telnyx (or twilio)', mode: 'refuse (or error, stall, up)' },
    run: async (c) => {
      const carrier = c.given.carrier ?? 'telnyx';
      const mode = c.given.mode ?? 'refuse';
      if (!['telnyx', 'twilio'].includes(carrier)) throw new UsageError('--carrier is telnyx or twilio');
      if (!['refuse', 'error', 'stall', 'up'].includes(mode))
        throw new UsageError('--mode is refuse, error, stall or up');
      const answer = await (carrier === 'twilio' ? c.twilioSim : c.sim)('PUT', '/down', { mode });
      if (answer?.mode !== mode)
        throw new Error(`the ${carrier} simulator did not take the mode: ${JSON.stringify(answer)}`);
      const what: Record<string, string> = {
        refuse: 'now refuses every connection: requests certainly never reach it',
        error: 'now answers every request 503, doing nothing',
        stall: 'now carries out every request and never answers: outcomes are unknown',
        up: 'is back up',
      };
      c.out(`${carrier} ${what[mode]}.`);
      const carriers = must(await c.api.GET('/v1/carriers'), 'GET /v1/carriers').data;
      for (const x of carriers)
        c.out(`  ${x.name.padEnd(7)} ${x.status}${x.refusals ? ` (${x.refusals} refused in a row)` : ''}`);
      return { carrier, mode, carriers };
    },
  },
  failover: {
    about: 'Telnyx refuses connections; a message with a Twilio fallback goes out once, through Twilio',
    takes: {
      from: YOUR_NUMBER,
      to: '+15555550100, which the simulator delivers',
      body: GREETING,
    },
    run: async (c) => {
      const fallback = c.oursAtTwilio;
      if (!fallback) throw new UsageError('failover needs a handset dev with a Twilio number (restart handset dev)');
      const to = c.given.to ?? '+15555550100';
      const body = c.given.body ?? `Hello from handset trigger at ${new Date().toISOString()}`;
      await c.sim('PUT', '/down', { mode: 'refuse' });
      c.out('Telnyx now refuses every connection.');
      try {
        const sent = must(
          await c.api.POST('/v1/messages', { body: { from: ours(c, 'from'), to, body, fallback_from: fallback } }),
          'POST /v1/messages',
        );
        c.out(`Sent ${sent.id} from ${sent.from} (Telnyx) with fallback_from ${fallback} (Twilio).`);
        const { message, history, events } = await messageSettled(c, sent.id, ['delivered', 'failed']);
        for (const h of history as { carrier: string | null; status: string; effect: string; note: string | null }[]) {
          c.out(`  ${(h.carrier ?? '').padEnd(7)} ${h.status.padEnd(9)} ${h.effect}${h.note ? ` — ${h.note}` : ''}`);
        }
        const telnyx = (
          (await c.sim('GET', '/state')).recentRequests as {
            path: string;
            idempotencyKey: string | null;
            status: number | null;
            replayed: boolean;
          }[]
        ).filter(
          (r) => r.path === '/v2/messages' && r.idempotencyKey === sent.id && r.status === 200 && !r.replayed,
        ).length;
        const twilio = (await c.twilioSim('GET', `/accepted?marker=${encodeURIComponent(sent.id)}`)).accepted as number;
        c.out(
          `It is ${message.status}, sent through ${message.carrier} from ${message.from}` +
            `${message.failover ? ` (failed over from ${message.failover.carrier}: ${message.failover.reason})` : ''}.`,
        );
        c.out(
          `Accepted by Telnyx ${telnyx} time(s), by Twilio ${twilio} time(s); your endpoint got: ${events.join(', ')}.`,
        );
        return {
          message: { ...messageSummary(message), carrier: message.carrier, failover: message.failover },
          accepted: { telnyx, twilio },
          events,
        };
      } finally {
        await c.sim('PUT', '/down', { mode: 'up' });
        c.out('Telnyx is back up.');
      }
    },
  },
  'opt-out': {
    about: 'someone texts STOP: the next send to them is refused; they text START and sends reach them again',
    takes: { from: 'a random +1415555…, who opts out and back in', to: YOUR_NUMBER },
    run: async (c) => {
      const recipient = c.given.from ?? randomNumber();
      const number = ours(c, 'to');
      const listed = async () =>
        must(await c.api.GET('/v1/opt_outs', { params: { query: { number, recipient } } }), 'GET /v1/opt_outs')
          .data[0] ?? null;
      await c.sim('POST', '/inbound/sms', { from: recipient, to: number, text: 'Stop' });
      c.out(`${recipient} texted "Stop" to ${number}.`);
      const optOut = await waitFor(`${recipient} on the opt-out list`, listed);
      c.out(`Handset opted them out (${optOut.id}, source ${optOut.source}).`);
      const refused = await c.api.POST('/v1/messages', {
        body: { from: number, to: recipient, body: 'Are you there?' },
      });
      const status = refused.response.status;
      c.out(`Sending to them now: ${status} ${refused.error?.code ?? ''} — nothing reached the carrier.`);
      await c.sim('POST', '/inbound/sms', { from: recipient, to: number, text: 'START' });
      c.out(`${recipient} texted "START".`);
      await waitFor(`${recipient} off the opt-out list`, async () => (await listed()) === null);
      c.out('Handset opted them back in.');
      const sent = await sendAndFollow({ ...c, given: { ...c.given, from: number } }, recipient, 'delivered');
      const events = await eventsOf(c, optOut.id);
      c.out(`Your endpoint got: ${events.join(', ')} for the opt-out.`);
      return { opt_out: optOut, refused: { status, code: refused.error?.code }, sent, events };
    },
  },
  'sequential-ring': {
    about: 'place a call that rings three phones in order: no answer, busy, then one that answers',
    takes: { from: YOUR_NUMBER, to: `${DEMO_RING.join(',')} (no answer, busy, answers after 2 s)` },
    run: async (c) => {
      const to = c.given.to ? c.given.to.split(',').map((n) => n.trim()) : DEMO_RING;
      const placed = await placeCall(c, { from: ours(c, 'from'), to, ring_timeout_secs: 5 });
      c.out(`Placed ${placed.id}, ringing ${to.join(' → ')} (5 s each)…`);
      const { call, events } = await callSettled(c, placed.id, 60_000);
      printLegs(c, call);
      c.out(`Call ${call.status} after ${call.duration_seconds} s; events: ${events.join(', ')}`);
      return { call: callSummary(call), events };
    },
  },
  'recorded-call': {
    about: 'place a call that is recorded and transcribed: the recording is stored once and transcribed once',
    takes: { from: YOUR_NUMBER, to: '+15555550100, which answers after 1 s and talks 3 s' },
    run: async (c) => {
      const to = c.given.to ?? '+15555550100';
      const placed = await placeCall(c, {
        from: ours(c, 'from'),
        to: [to],
        ring_timeout_secs: 10,
        record: true,
        transcribe: true,
      });
      c.out(`Placed ${placed.id} to ${to}, recorded and transcribed.`);
      const { call } = await callSettled(c, placed.id, 60_000);
      c.out(`Call ${call.status} after ${call.duration_seconds} s.`);
      const recording = await waitFor(
        'its recording to be transcribed',
        async () => {
          const path = { id: call.id };
          const r = must(await c.api.GET('/v1/calls/{id}/recordings', { params: { path } }), 'GET recordings').data[0];
          return r && r.audio_status !== 'pending' && ['completed', 'failed'].includes(r.transcription_status) && r;
        },
        120_000,
      );
      c.out(
        `Recording ${recording.id}: ${recording.duration_seconds} s, audio ${recording.audio_status}, ` +
          `transcription ${recording.transcription_status}${recording.transcript ? `: "${recording.transcript}"` : ''}.`,
      );
      const events = [...(await eventsOf(c, call.id)), ...(await eventsOf(c, recording.id))];
      c.out(`Your endpoint got: ${events.join(', ')} — one of each.`);
      return { call: callSummary(call), recording, events };
    },
  },
  'lost-hangup': {
    about: 'the carrier loses a hangup for good: Handset asks the carrier and ends the call from its record',
    takes: { from: YOUR_NUMBER },
    run: async (c) => {
      const to = `+1555555${String(Math.floor(Math.random() * 9000) + 1000)}`;
      await c.sim('PUT', `/personas/${encodeURIComponent(to)}`, {
        call: { answerAfterMs: 1000, talkMs: 3000 },
        lose: ['call.hangup'],
      });
      const placed = await placeCall(c, { from: ours(c, 'from'), to: [to], ring_timeout_secs: 10 });
      c.out(
        `Placed ${placed.id} to ${to}: it answers, talks 3 s and hangs up — and the carrier never tells us it hung up.`,
      );
      const { call, events } = await callSettled(c, placed.id, 180_000);
      printLegs(c, call);
      c.out(`Call ${call.status} after ${call.duration_seconds} s (the carrier's times); events: ${events.join(', ')}`);
      const lost = ((await c.sim('GET', '/dropped')) as { data?: { eventType: string; body: string }[] }).data ?? [];
      const hangups = lost.filter((d) => d.eventType === 'call.hangup' && d.body.includes(to));
      for (const d of hangups) await c.sim('POST', '/deliver', { body: d.body });
      if (hangups.length === 0) return { call: callSummary(call), events };
      const late = await callSettled(c, call.id, 30_000);
      c.out(`The lost hangup arrived at last; Handset changed nothing: events ${late.events.join(', ')}.`);
      return { call: callSummary(late.call), events: late.events, late_hangups_delivered: hangups.length };
    },
  },
  'inbound-call': {
    about: 'someone calls your number; it rings your ring plan and bridges the one who answers',
    takes: { from: 'a random +1415555…', to: YOUR_NUMBER },
    run: async (c) => {
      const from = c.given.from ?? randomNumber();
      const to = ours(c, 'to');
      const injected = await c.sim('POST', '/inbound/call', { from, to });
      c.out(`${from} is calling ${to} (carrier leg ${injected.call_control_id}).`);
      const found = await waitFor(`an inbound call from ${from}`, async () => {
        const list = await c.api.GET('/v1/calls', { params: { query: { direction: 'inbound', limit: 20 } } });
        return must(list, 'GET /v1/calls').data.find((x) => x.from === from);
      });
      const { call, events } = await callSettled(c, found.id, 60_000);
      printLegs(c, call);
      c.out(`Call ${call.status}; events: ${events.join(', ')}`);
      return { call: callSummary(call), events };
    },
  },
};

function ours(c: Ctx, param: 'from' | 'to'): string {
  const n = c.given[param] ?? c.ours;
  if (!n) throw new UsageError(`pass --${param} (your Handset number): there is no handset dev to take it from`);
  return n;
}

async function sendAndFollow(c: Ctx, defaultTo: string, expect: string): Promise<Summary> {
  const to = c.given.to ?? defaultTo;
  const body = c.given.body ?? `Hello from handset trigger at ${new Date().toISOString()}`;
  const sent = must(
    await c.api.POST('/v1/messages', { body: { from: ours(c, 'from'), to, body } }),
    'POST /v1/messages',
  );
  c.out(`Sent ${sent.id} to ${to} (status ${sent.status}).`);
  const { message, events } = await messageSettled(c, sent.id, ['delivered', 'failed']);
  c.out(`${whatBecameOf(message)}${message.status === expect ? '' : ` (expected: ${expect})`}.`);
  return { message: messageSummary(message), events };
}

/** What became of a message, as a person says it: "It was not delivered: the carrier answered error 40008". */
function whatBecameOf(m: Message): string {
  const words: Partial<Record<Message['status'], string>> = {
    delivered: 'It was delivered',
    failed: 'It was not delivered',
    canceled: 'It was canceled before it was sent',
  };
  const why = m.error_code ? `: the carrier answered error ${m.error_code}` : '';
  return `${words[m.status] ?? `It is still ${m.status}`}${why}`;
}

type CallRequest = operations['createCall']['requestBody']['content']['application/json'];

async function placeCall(c: Ctx, body: CallRequest): Promise<Call> {
  return must(await c.api.POST('/v1/calls', { body }), 'POST /v1/calls');
}

/** The data of an answer, or an error saying which request the API refused and why. */
function must<T>(answer: { data?: T; error?: unknown; response: Response }, what: string): T {
  if (answer.data === undefined) {
    throw new Error(`${what}: ${answer.response.status} ${JSON.stringify(answer.error)}`);
  }
  return answer.data;
}

function printLegs(c: Ctx, call: Call) {
  for (const leg of call.legs) {
    const learned = leg.reconciled?.length ? ` — ${leg.reconciled.join(', ')} learned from the carrier's record` : '';
    c.out(
      `  leg ${leg.position}: ${leg.to}  ${leg.status}${leg.hangup_cause ? ` (${leg.hangup_cause})` : ''}${learned}`,
    );
  }
}

const messageSummary = (m: Message) => ({
  id: m.id,
  direction: m.direction,
  from: m.from,
  to: m.to,
  status: m.status,
  error_code: m.error_code,
});

const callSummary = (call: Call) => ({
  id: call.id,
  status: call.status,
  duration_seconds: call.duration_seconds,
  legs: call.legs.map((l) => ({
    position: l.position,
    to: l.to,
    status: l.status,
    hangup_cause: l.hangup_cause,
    reconciled: l.reconciled,
  })),
});

// ─── waiting for Handset ─────────────────────────────────────────────────────

/** How long what the API shows must stay the same before trigger reports it. */
const QUIET_MS = 1_000;
const POLL_MS = 200;

/**
 * Polls `read` until `done` holds and what it read has not changed for QUIET_MS:
 * the last carrier word has been applied (or refused), and its events written.
 */
async function settle<T>(what: string, read: () => Promise<T>, done: (v: T) => boolean, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  let since = Date.now();
  for (;;) {
    const value = await read();
    const seen = JSON.stringify(value);
    if (seen !== last) [last, since] = [seen, Date.now()];
    else if (done(value) && Date.now() - since >= QUIET_MS) return value;
    if (Date.now() > deadline) throw new Error(`gave up after ${timeoutMs / 1000} s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

async function eventsOf(c: Ctx, subjectId: string): Promise<string[]> {
  const list = await c.api.GET('/v1/events', { params: { query: { subject_id: subjectId, limit: 100 } } });
  return must(list, 'GET /v1/events')
    .data.map((e) => e.type)
    .reverse();
}

async function messageSettled(c: Ctx, id: string, final: string[], timeoutMs = 30_000) {
  return settle(
    `${id} to reach ${final.join(' or ')} and stay`,
    async () => ({
      message: must(await c.api.GET('/v1/messages/{id}', { params: { path: { id } } }), `GET ${id}`),
      history: must(await c.api.GET('/v1/messages/{id}/status_history', { params: { path: { id } } }), `GET history`)
        .data,
      events: await eventsOf(c, id),
    }),
    (v) => final.includes(v.message.status),
    timeoutMs,
  );
}

async function callSettled(c: Ctx, id: string, timeoutMs: number) {
  return settle(
    `${id} to end and stay ended`,
    async () => ({
      call: must(await c.api.GET('/v1/calls/{id}', { params: { path: { id } } }), `GET ${id}`),
      events: await eventsOf(c, id),
    }),
    (v) => ['completed', 'missed'].includes(v.call.status),
    timeoutMs,
  );
}

async function waitFor<T>(what: string, fn: () => Promise<T | false | undefined | null>, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`gave up after ${timeoutMs / 1000} s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

function randomNumber(): string {
  return `+1415555${String(Math.floor(Math.random() * 10_000)).padStart(4, '0')}`;
}

// ─── the command ─────────────────────────────────────────────────────────────

export interface TriggerFlags {
  list?: boolean;
  json?: boolean;
  from?: string;
  to?: string;
  body?: string;
  carrier?: string;
  mode?: string;
  apiUrl?: string;
  apiKey?: string;
  simUrl?: string;
}

/** `handset trigger`: its arguments and flags (no action: the caller attaches one). */
export function triggerCommand(): Command {
  return new Command('trigger')
    .description('drive the simulator through the real pipeline and report what Handset made of it')
    .argument('[scenario]', `one of ${Object.keys(SCENARIOS).join(', ')}`)
    .option('--list', 'describe each scenario and what it takes')
    .option('--from <number>', 'the sender (outbound: your number; inbound: the caller)')
    .option('--to <number>', 'the recipient (outbound: theirs, comma-separated for a ring; inbound: your number)')
    .option('--body <text>', 'the SMS text')
    .option('--carrier <name>', 'carrier-down: which carrier (telnyx, twilio)')
    .option('--mode <mode>', 'carrier-down: refuse, error, stall or up')
    .option('--json', 'print what Handset made of it as JSON, and nothing else')
    .option('--api-url <url>', 'the Handset API (default: the running handset dev; or HANDSET_API_URL)')
    .option('--api-key <key>', 'its API key (default: the running handset dev’s demo key; or HANDSET_API_KEY)')
    .option('--sim-url <url>', 'the simulator’s control URL (default: the running handset dev’s)');
}

export function describeScenarios(): string {
  const lines = [
    'scenarios (handset trigger <scenario> [--from N] [--to N] [--body TEXT] [--carrier C] [--mode M] [--json]):',
    '',
  ];
  for (const [name, s] of Object.entries(SCENARIOS)) {
    lines.push(`  ${name.padEnd(16)} ${s.about}`);
    for (const p of PARAMS) if (s.takes[p]) lines.push(`  ${''.padEnd(16)}   --${p.padEnd(7)} default: ${s.takes[p]}`);
  }
  return lines.join('\n');
}

export async function runTrigger(
  scenarioName: string | undefined,
  flags: TriggerFlags,
  stateDir: string,
  out: Out,
  /** Where the line saying which dev it talks to goes (stderr: stdout may carry --json). */
  note: Out = () => undefined,
): Promise<number> {
  if (flags.list) {
    out(describeScenarios());
    return 0;
  }
  const names = Object.keys(SCENARIOS);
  if (!scenarioName) throw new UsageError(`name a scenario: ${names.join(', ')} (handset trigger --list)`);
  const scenario = SCENARIOS[scenarioName];
  if (!scenario) {
    const near = nearest(scenarioName, names);
    throw new UsageError(
      `unknown scenario '${scenarioName}'${near ? ` — did you mean '${near}'?` : ''} (scenarios: ${names.join(', ')})`,
    );
  }
  const given: Partial<Record<Param, string>> = {};
  for (const p of PARAMS) {
    const v = flags[p];
    if (v === undefined) continue;
    if (!scenario.takes[p]) {
      const takes = PARAMS.filter((q) => scenario.takes[q]).map((q) => `--${q}`);
      throw new UsageError(`${scenarioName} does not take --${p} (it takes ${takes.join(', ') || 'none'})`);
    }
    given[p] = v;
  }
  const { apiUrl, apiKey, dev, via } = await resolveApi(stateDir, { apiUrl: flags.apiUrl, apiKey: flags.apiKey });
  if (via) note(via);
  const simUrl = flags.simUrl ?? dev?.simControlUrl;
  const twilioSimUrl = dev?.twilioSimControlUrl;
  const summary = await scenario.run({
    api: createClient({ baseUrl: apiUrl, apiKey, fetch: (req) => reach(apiUrl, () => fetch(req)) }),
    sim: async (m, p, b) => {
      if (!simUrl) throw new UsageError('no simulator to drive: pass --sim-url (its control URL)');
      return request(simUrl, m, p, b);
    },
    twilioSim: async (m, p, b) => {
      if (!twilioSimUrl) throw new UsageError('no Twilio simulator to drive: run it next to a handset dev');
      return request(twilioSimUrl, m, p, b);
    },
    given,
    ours: dev?.number ?? null,
    oursAtTwilio: dev?.twilioNumber ?? null,
    out: flags.json ? () => undefined : out,
  });
  if (flags.json) out(JSON.stringify({ scenario: scenarioName, ...summary }, null, 2));
  return 0;
}

/** A request to the API or the simulator; a network failure says which went away. */
async function reach(base: string, send: () => Promise<Response>): Promise<Response> {
  try {
    return await send();
  } catch (err) {
    throw new Error(`lost ${base} (${networkReason(err)}): did handset dev stop?`, { cause: err });
  }
}

/** A request to the simulator's control API (not part of Handset's API, so untyped). */
async function request(base: string, method: string, path: string, body?: unknown) {
  const res = await reach(base, () =>
    fetch(base + path, {
      method,
      ...(body ? { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) } : {}),
    }),
  );
  return (await res.json().catch(() => null)) as Json;
}
