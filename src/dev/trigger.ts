// `handset trigger <scenario>`: drives the simulator through the real pipeline
// (like `stripe trigger`), so a developer sees exactly-once with their own eyes:
// a real API call or an injected carrier event, the carrier misbehaving if the
// scenario says so, then what Handset made of it and which customer events it
// sent. Needs a running `handset dev` (or --api-url/--api-key and --sim-url).

import { parseArgs } from 'node:util';
import { DEMO_RING } from './dev.js';
import { resolveApi } from './state.js';

type Out = (line: string) => void;

interface Ctx {
  // biome-ignore lint/suspicious/noExplicitAny: scenarios read the API's JSON loosely, as a script would
  api: (method: string, path: string, body?: unknown) => Promise<{ status: number; json: any }>;
  // biome-ignore lint/suspicious/noExplicitAny: the simulator's control API, read loosely
  sim: (method: string, path: string, body?: unknown) => Promise<any>;
  number: string;
  out: Out;
}

export const SCENARIOS: Record<string, { about: string; run: (c: Ctx) => Promise<void> }> = {
  delivered: {
    about: 'send an SMS that the carrier delivers',
    run: async (c) => void (await sendAndFollow(c, '+15555550100', 'delivered')),
  },
  failed: {
    about: 'send an SMS the carrier cannot deliver (error 40008)',
    run: async (c) => void (await sendAndFollow(c, '+15555550101', 'failed')),
  },
  'inbound-sms': {
    about: 'someone texts your number',
    run: async (c) => {
      const from = randomNumber();
      await c.sim('POST', '/inbound/sms', { from, to: c.number, text: 'Hi! Is this Handset?' });
      c.out(`The carrier delivered an SMS from ${from} to ${c.number}.`);
      const m = await waitFor(async () => {
        const list = await c.api('GET', '/v1/messages?direction=inbound&limit=10');
        return list.json.data.find((x: { from: string }) => x.from === from);
      });
      c.out(`Handset made it ${m.id} (status ${m.status}); events: ${(await eventTypes(c, m.id)).join(', ')}`);
    },
  },
  'duplicate-storm': {
    about: 'the carrier repeats itself: every webhook twice, re-sent under new ids, and a contradiction after delivery',
    run: async (c) => {
      const before = (await c.sim('GET', '/state')).counts;
      const previous = (await c.sim('GET', '/state')).behaviour;
      await c.sim('PUT', '/behaviour', { duplicateRate: 1, resendNewIdRate: 1, contradictionRate: 1 });
      try {
        c.out(
          'The simulator now sends every webhook twice, re-sends each fact under a new event id, and says "delivery_failed" after "delivered".',
        );
        const id = await sendAndFollow(c, '+15555550100', 'delivered');
        await c.sim('GET', '/idle');
        const after = (await c.sim('GET', '/state')).counts;
        c.out(
          `The carrier told ${after.events - before.events} facts in ${after.attempts - before.attempts} webhooks ` +
            `(${after.duplicates - before.duplicates} duplicates, ${after.resends - before.resends} re-sent under new ids).`,
        );
        const history = (await c.api('GET', `/v1/messages/${id}/status_history`)).json.data as {
          effect: string;
          carrier_status: string | null;
        }[];
        const refused = history.filter((h) => h.effect === 'refused').map((h) => h.carrier_status);
        c.out(
          `Handset applied one terminal status and refused ${refused.length} later word(s): ${refused.join(', ') || 'none'}.`,
        );
        c.out(`Your endpoint got: ${(await eventTypes(c, id)).join(', ')} — one event per transition.`);
      } finally {
        await c.sim('PUT', '/behaviour', previous);
      }
    },
  },
  'sequential-ring': {
    about: 'place a call that rings three phones in order: no answer, busy, then one that answers',
    run: async (c) => {
      const res = await c.api('POST', '/v1/calls', { from: c.number, to: DEMO_RING, ring_timeout_secs: 5 });
      if (res.status !== 201) throw new Error(`POST /v1/calls: ${JSON.stringify(res.json)}`);
      c.out(`Placed ${res.json.id}, ringing ${DEMO_RING.join(' → ')} (5 s each)…`);
      const call = await waitFor(async () => {
        const got = (await c.api('GET', `/v1/calls/${res.json.id}`)).json;
        return ['completed', 'missed'].includes(got.status) && got;
      }, 60_000);
      for (const leg of call.legs)
        c.out(`  leg ${leg.position}: ${leg.to}  ${leg.status}${leg.hangup_cause ? ` (${leg.hangup_cause})` : ''}`);
      c.out(
        `Call ${call.status} after ${call.duration_seconds} s; events: ${(await eventTypes(c, call.id)).join(', ')}`,
      );
    },
  },
  'lost-hangup': {
    about:
      'a call whose hangup webhook the carrier loses for good: Handset asks the carrier and ends it from its record',
    run: async (c) => {
      const to = `+1555555${String(Math.floor(Math.random() * 9000) + 1000)}`;
      await c.sim('PUT', `/personas/${encodeURIComponent(to)}`, {
        call: { answerAfterMs: 1000, talkMs: 3000 },
        lose: ['call.hangup'],
      });
      const res = await c.api('POST', '/v1/calls', { from: c.number, to: [to], ring_timeout_secs: 10 });
      if (res.status !== 201) throw new Error(`POST /v1/calls: ${JSON.stringify(res.json)}`);
      c.out(
        `Placed ${res.json.id} to ${to}: it answers, talks 3 s and hangs up — and the carrier never tells us it hung up.`,
      );
      const call = await waitFor(async () => {
        const got = (await c.api('GET', `/v1/calls/${res.json.id}`)).json;
        return ['completed', 'missed'].includes(got.status) && got;
      }, 180_000);
      for (const leg of call.legs) {
        const learned = leg.reconciled.length
          ? ` — ${leg.reconciled.join(', ')} learned from the carrier's record`
          : '';
        c.out(
          `  leg ${leg.position}: ${leg.to}  ${leg.status}${leg.hangup_cause ? ` (${leg.hangup_cause})` : ''}${learned}`,
        );
      }
      c.out(
        `Call ${call.status} after ${call.duration_seconds} s (the carrier's times); events: ${(await eventTypes(c, call.id)).join(', ')}`,
      );
      const lost = ((await c.sim('GET', '/dropped')) as { data?: { eventType: string; body: string }[] }).data ?? [];
      const hangups = lost.filter(
        (d) => d.eventType === 'call.hangup' && d.body.includes(call.legs[0]?.to ?? '\u0000'),
      );
      for (const d of hangups) await c.sim('POST', '/deliver', { body: d.body });
      if (hangups.length) {
        await new Promise((r) => setTimeout(r, 1500));
        c.out(
          `The lost hangup arrived at last; Handset changed nothing: events ${(await eventTypes(c, call.id)).join(', ')}.`,
        );
      }
    },
  },
  'inbound-call': {
    about: 'someone calls your number; it rings your ring plan and bridges the one who answers',
    run: async (c) => {
      const from = randomNumber();
      const injected = await c.sim('POST', '/inbound/call', { from, to: c.number });
      c.out(`${from} is calling ${c.number} (carrier leg ${injected.call_control_id}).`);
      const call = await waitFor(async () => {
        const list = await c.api('GET', '/v1/calls?direction=inbound&limit=10');
        const found = list.json.data.find((x: { from: string }) => x.from === from);
        return found && ['completed', 'missed'].includes(found.status) && found;
      }, 60_000);
      for (const leg of call.legs)
        c.out(`  leg ${leg.position}: ${leg.to}  ${leg.status}${leg.hangup_cause ? ` (${leg.hangup_cause})` : ''}`);
      c.out(`Call ${call.status}; events: ${(await eventTypes(c, call.id)).join(', ')}`);
    },
  },
};

async function sendAndFollow(c: Ctx, to: string, expect: string): Promise<string> {
  const res = await c.api('POST', '/v1/messages', {
    from: c.number,
    to,
    body: `Hello from handset trigger at ${new Date().toISOString()}`,
  });
  if (res.status !== 201) throw new Error(`POST /v1/messages: ${JSON.stringify(res.json)}`);
  c.out(`Sent ${res.json.id} to ${to} (status ${res.json.status}).`);
  const m = await waitFor(async () => {
    const got = (await c.api('GET', `/v1/messages/${res.json.id}`)).json;
    return ['delivered', 'failed'].includes(got.status) && got;
  });
  c.out(
    `It is ${m.status}${m.error_code ? ` (error ${m.error_code})` : ''}${m.status === expect ? '' : ` — expected ${expect}`}.`,
  );
  return m.id as string;
}

async function eventTypes(c: Ctx, subjectId: string): Promise<string[]> {
  await new Promise((r) => setTimeout(r, 300)); // let the last transition's event commit
  const list = await c.api('GET', `/v1/events?subject_id=${subjectId}&limit=100`);
  return (list.json.data as { type: string }[]).map((e) => e.type).reverse();
}

async function waitFor<T>(fn: () => Promise<T | false | undefined | null>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error('gave up waiting (is handset dev running?)');
    await new Promise((r) => setTimeout(r, 250));
  }
}

function randomNumber(): string {
  return `+1415555${String(Math.floor(Math.random() * 10_000)).padStart(4, '0')}`;
}

export async function runTrigger(args: string[], stateDir: string, out: Out): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      'api-url': { type: 'string' },
      'api-key': { type: 'string' },
      'sim-url': { type: 'string' },
      number: { type: 'string' },
    },
  });
  const scenario = positionals[0] ? SCENARIOS[positionals[0]] : undefined;
  if (!scenario) {
    out('usage: handset trigger <scenario>\n\nscenarios:');
    for (const [name, s] of Object.entries(SCENARIOS)) out(`  ${name.padEnd(16)} ${s.about}`);
    return positionals[0] ? 2 : 0;
  }
  const { apiUrl, apiKey, dev } = await resolveApi(stateDir, { apiUrl: values['api-url'], apiKey: values['api-key'] });
  const simUrl = values['sim-url'] ?? dev?.simControlUrl;
  const number = values.number ?? dev?.number;
  if (!simUrl || !number)
    throw new Error('no simulator to drive: run `npm start` first, or pass --sim-url and --number');
  const call = async (base: string, headers: Record<string, string>, method: string, path: string, body?: unknown) => {
    const res = await fetch(base + path, {
      method,
      headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.status, json: (await res.json().catch(() => null)) as unknown };
  };
  await scenario.run({
    api: (m, p, b) => call(apiUrl, { authorization: `Bearer ${apiKey}` }, m, p, b) as never,
    sim: async (m, p, b) => (await call(simUrl, {}, m, p, b)).json,
    number,
    out,
  });
  return 0;
}
