// The inbox phase: what @handset/inbox costs a customer's receiver, beside the
// same handler and transaction without it, measured in the same run on the same
// PostgreSQL. Latency at 100 requests/s (open loop, both paths at once), the p50
// and p99 it adds; then unique events at concurrency 32 (closed loop): verified,
// deduplicated events/s beside the plain handler's; and the same events again,
// each now a duplicate. The receiver is a process of its own (inbox-server.ts).

import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { newId } from '../../db/ids.js';
import { webhookHeaders, newEndpointSecret } from '../../delivery/signature.js';
import type { BenchDatabase } from './database.js';
import { drive, hammer, type LoadResult } from './http-load.js';
import type { BenchOptions } from './options.js';
import type { Target } from './report.js';
import { round } from './stats.js';
import type { SignedWebhook } from './webhooks.js';

const SERVER = fileURLToPath(new URL('./inbox-server.js', import.meta.url));
const SCHEMA = 'bench_inbox';
const PACED_RATE = 100;
const CONCURRENCY = 32;

export interface InboxBench {
  paced: { rate: number; inbox: LoadResult; plain: LoadResult };
  concurrent: {
    concurrency: number;
    inbox: LoadResult;
    plain: LoadResult;
    duplicates: LoadResult;
    /**
     * Ids remembered and handler rows added during the measured unique run: equal,
     * and its 200s plus at most the requests in flight when the warm-up and the
     * measurement stopped (2 × concurrency).
     */
    remembered: number;
    effects: number;
    /**
     * Over the whole phase: event ids the inbox handled more than once, and ids it
     * remembered with no handler row. Both 0.
     */
    doubled: number;
    unhandled: number;
    /**
     * Event ids the plain handler (no inbox) ran more than once: what the load
     * generator sent twice, which only the inbox would have caught. Expected 0.
     */
    sentTwice: number;
  };
}

export async function inboxPhase(
  db: BenchDatabase,
  opts: BenchOptions,
  log: (line: string) => void,
): Promise<InboxBench> {
  await db.pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  await db.pool.query(`CREATE SCHEMA ${SCHEMA}`);
  await db.pool.query(
    `CREATE TABLE ${SCHEMA}.effects (event_id text NOT NULL, subject text NOT NULL, amount int NOT NULL,
       via text NOT NULL, at timestamptz NOT NULL DEFAULT now())`,
  );
  const secret = newEndpointSecret();
  const receiver = await startReceiver({
    DATABASE_URL: db.url,
    BENCH_INBOX_SECRET: secret,
    BENCH_INBOX_SCHEMA: SCHEMA,
    BENCH_INBOX_POOL: '40',
  });
  const signed = (n: number) => Array.from({ length: n }, () => signedEvent(secret));
  const { inboxUrl, plainUrl } = receiver;
  const fmt = (r: LoadResult) =>
    `${Math.round(r.rate).toLocaleString('en-US')}/s  p50 ${r.latency.p50.toFixed(2)} ms  p99 ${r.latency.p99.toFixed(2)} ms  (${r.requests} req${r.errors ? `, ${r.errors} errors` : ''})`;
  try {
    // Warm both paths: connections open, statements planned, code compiled.
    for (const url of [plainUrl, inboxUrl]) {
      await drive({ url, items: signed(200), request: (w) => w, concurrency: 8 });
    }
    const paced = (url: string) =>
      drive({
        url,
        items: signed(Math.max(50, Math.round(PACED_RATE * opts.duration))),
        request: (w) => w,
        concurrency: 64,
        rate: PACED_RATE,
      });
    // Both at once, each at its rate: a stall of the machine (a slow fsync, another
    // process's turn) then lands on both alike, where one after the other it lands on
    // whichever was running and swings the p99 difference by tens of milliseconds.
    const [plainPaced, inboxPaced] = await Promise.all([paced(plainUrl), paced(inboxUrl)]);
    log(`  ${PACED_RATE}/s, same handler without the inbox  ${fmt(plainPaced)}`);
    log(`  ${PACED_RATE}/s, through the inbox, at the same time ${fmt(inboxPaced)}`);

    const budget = (seconds: number) => signed(Math.ceil(6000 * (seconds + opts.warmup)));
    // Closed loop after a warm-up; the rows the measured part added are counted apart.
    const closed = async (url: string, webhooks: SignedWebhook[]) => {
      let from = 0;
      if (opts.warmup > 0)
        from = (await hammer({ urls: [url], connections: CONCURRENCY, seconds: opts.warmup, webhooks })).used;
      const before = await counts(db);
      const { used, ...r } = await hammer({
        urls: [url],
        connections: CONCURRENCY,
        seconds: opts.duration,
        webhooks,
        from,
      });
      const after = await counts(db);
      const added = { remembered: after.remembered - before.remembered, effects: after.effects - before.effects };
      return { r, added, sent: webhooks.slice(0, from + used) };
    };
    const { r: plain } = await closed(plainUrl, budget(opts.duration));
    log(`  c=${CONCURRENCY}, same handler without the inbox  ${fmt(plain)}`);
    const { r: inbox, added, sent } = await closed(inboxUrl, budget(opts.duration));
    log(`  c=${CONCURRENCY}, through the inbox               ${fmt(inbox)}`);
    const { used: _du, ...duplicates } = await hammer({
      urls: [inboxUrl],
      connections: CONCURRENCY,
      seconds: opts.duration,
      webhooks: repeatTo(sent, 6000 * opts.duration),
    });
    const { rows: check } = await db.pool.query<{ doubled: number; unhandled: number; sent_twice: number }>(
      `SELECT (SELECT count(*) FROM (SELECT FROM ${SCHEMA}.effects WHERE via = 'inbox'
                                      GROUP BY event_id HAVING count(*) > 1) d)::int AS doubled,
              (SELECT count(*) FROM (SELECT FROM ${SCHEMA}.effects WHERE via = 'plain'
                                      GROUP BY event_id HAVING count(*) > 1) d)::int AS sent_twice,
              (SELECT count(*) FROM ${SCHEMA}.handset_inbox i
                WHERE NOT EXISTS (SELECT 1 FROM ${SCHEMA}.effects e WHERE e.event_id = i.event_id))::int AS unhandled`,
    );
    log(`  c=${CONCURRENCY}, the same events again (duplicates) ${fmt(duplicates)}`);
    return {
      paced: { rate: PACED_RATE, inbox: inboxPaced, plain: plainPaced },
      concurrent: {
        concurrency: CONCURRENCY,
        inbox,
        plain,
        duplicates,
        remembered: added.remembered,
        effects: added.effects,
        doubled: check[0]!.doubled,
        unhandled: check[0]!.unhandled,
        sentTwice: check[0]!.sent_twice,
      },
    };
  } finally {
    await receiver.stop();
    await db.pool.query(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`);
  }
}

/** inbox-server.ts as a process of its own; resolves with its base URL once it listens. */
async function startReceiver(
  env: Record<string, string>,
): Promise<{ inboxUrl: string; plainUrl: string; stop(): Promise<void> }> {
  const child = spawn(process.execPath, ['--unhandled-rejections=strict', SERVER], {
    env: { PATH: process.env['PATH'], HOME: process.env['HOME'], ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const [inboxUrl, plainUrl] = await new Promise<[string, string]>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      out = (out + chunk.toString('utf8')).slice(-4000);
      const inbox = /inbox listening on (http:\S+)/.exec(out);
      const plain = /plain listening on (http:\S+)/.exec(out);
      if (inbox && plain) resolve([inbox[1]!, plain[1]!]);
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then(() => reject(new Error(`the bench's inbox receiver exited:\n${out}`)));
  });
  return {
    inboxUrl,
    plainUrl,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      await exited;
    },
  };
}

/**
 * A Handset event (a message's transition, with a subject and sequence), signed
 * as Handset signs it; its ids made as Handset makes them (time-ordered).
 */
function signedEvent(secret: string): SignedWebhook {
  const id = newId('evt');
  const subject = newId('msg');
  const body = JSON.stringify({
    id,
    type: 'message.delivered',
    timestamp: new Date().toISOString(),
    account_id: 'acct_bench',
    data: { id: subject, status: 'delivered', sequence: 2, segments: 1, amount: 1 },
  });
  return {
    eventId: id,
    carrierMessageId: subject,
    body: Buffer.from(body),
    headers: {
      'content-type': 'application/json',
      ...webhookHeaders([secret], id, Math.floor(Date.now() / 1000), body),
    },
  };
}

function repeatTo<T>(items: T[], n: number): T[] {
  const out: T[] = [];
  while (out.length < n && items.length > 0) out.push(...items);
  return out;
}

async function counts(db: BenchDatabase): Promise<{ remembered: number; effects: number }> {
  const { rows } = await db.pool.query<{ remembered: number; effects: number }>(
    `SELECT (SELECT count(*) FROM ${SCHEMA}.handset_inbox)::int AS remembered,
            (SELECT count(*) FROM ${SCHEMA}.effects)::int AS effects`,
  );
  return rows[0]!;
}

/** Targets: at most +1 ms p50 and +3 ms p99 at 100/s; at least 1,500 verified, deduplicated events/s at c=32. */
export function inboxTargets(r: InboxBench | undefined): Target[] {
  if (!r) return [];
  const p50 = r.paced.inbox.latency.p50 - r.paced.plain.latency.p50;
  const p99 = r.paced.inbox.latency.p99 - r.paced.plain.latency.p99;
  const c = r.concurrent;
  const answered = c.inbox.statuses['200'] ?? 0;
  const deduplicated =
    c.remembered === c.effects &&
    c.effects >= answered &&
    c.effects - answered <= 2 * c.concurrency &&
    c.doubled === 0 &&
    c.unhandled === 0 &&
    (c.duplicates.statuses['200'] ?? 0) === c.duplicates.requests;
  return [
    { target: `inbox adds ≤ 1 ms p50 at ${r.paced.rate}/s`, value: `+${round(p50)} ms`, met: p50 <= 1 },
    { target: `inbox adds ≤ 3 ms p99 at ${r.paced.rate}/s`, value: `+${round(p99)} ms`, met: p99 <= 3 },
    {
      target: `inbox ≥ 1,500 verified, deduplicated events/s at concurrency ${c.concurrency}`,
      value: `${Math.round(c.inbox.rate)}/s (plain ${Math.round(c.plain.rate)}/s)`,
      met: c.inbox.rate >= 1500 && deduplicated,
    },
  ];
}

/** The phase's lines for the bench's table. */
export function inboxTable(r: InboxBench | undefined): string {
  if (!r) return '';
  const row = (name: string, x: LoadResult) =>
    `  ${name.padEnd(44)} ${Math.round(x.rate).toLocaleString('en-US').padStart(7)}/s  p50 ${x.latency.p50.toFixed(2).padStart(6)} ms  p99 ${x.latency.p99.toFixed(2).padStart(6)} ms`;
  const c = r.concurrent;
  return [
    '@handset/inbox (the same handler and transaction, with and without it)',
    row(`${r.paced.rate}/s open loop, without the inbox`, r.paced.plain),
    row(`${r.paced.rate}/s open loop, through the inbox (at once)`, r.paced.inbox),
    row(`c=${c.concurrency} unique events, without the inbox`, c.plain),
    row(`c=${c.concurrency} unique events, through the inbox`, c.inbox),
    row(`c=${c.concurrency} the same events again (all duplicates)`, c.duplicates),
    `  unique run: ${c.inbox.statuses['200'] ?? 0} answered 200, ${c.remembered} ids remembered, ${c.effects} handler rows` +
      ` (the rest in flight at a stop); the replay: ${c.duplicates.statuses['200'] ?? 0} of ${c.duplicates.requests} answered 200; ids handled twice: ${c.doubled}, remembered but unhandled: ${c.unhandled}` +
      `; sent twice by the load generator (seen by the plain handler): ${c.sentTwice}`,
  ].join('\n');
}
