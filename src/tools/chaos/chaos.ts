// The chaos run: a storm of messages and calls, inbound and outbound, through a
// simulator that misbehaves hard (duplicates, re-sends under new ids,
// contradictions, early receipts, webhooks lost for good or held back far past
// every wait), with the worker role in separate processes that are SIGKILLed and
// restarted at random, and every database connection cut at random moments for
// random lengths. Then it waits for quiescence, runs the audit, and compares the
// customer events with what a well-behaved carrier would have produced: the
// carrier can be a rumor, the database can blink, the row stays the fact.
//
// What no receiver can recover is counted apart, not compared: an inbound SMS or
// call whose every webhook attempt failed (the carrier gave up while the database
// was cut) never reached Handset at all.
//
// Two carriers: a share of the messages goes from a Twilio number (the Twilio
// simulator misbehaving like Twilio: callbacks repeated, late, out of order and
// early, answers lost, 5xx), and a share from the Telnyx number with the Twilio
// number as fallback, while Telnyx's REST API refuses connections now and then
// (flapping). Every outbound message is counted at both simulators: accepted by
// exactly one carrier (none for a send the carrier refuses).

import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { accountCreate, apiKeyCreate } from '../../accounts/accounts.js';
import { formatAuditReport, runAudit, type AuditReport } from '../../audit/audit.js';
import { loadConfig } from '../../config.js';
import { createDatabase, dropDatabase } from '../../db/databases.js';
import { freePort } from '../../db/embedded.js';
import { migrate } from '../../db/migrate.js';
import { createPool } from '../../db/pool.js';
import { withTx } from '../../db/tx.js';
import { startPlatform } from '../../platform.js';
import { startSimulator, type Behaviour } from '../../sim/simulator.js';
import { startTwilioSimulator } from '../../sim/twilio/simulator.js';
import type { Logger } from '../../telemetry/log.js';
import { runServer } from './server.js';
import { startTcpProxy, type TcpProxy } from './tcp-proxy.js';
import { newSecretKey } from '../../delivery/keyring.js';

// The built CLI (from src/ under tests, from dist/ when built: both resolve to dist/).
export const HANDSET_BIN = fileURLToPath(new URL('../../../dist/cli/handset.js', import.meta.url));

export interface ChaosOptions {
  outboundMessages: number;
  inboundMessages: number;
  outboundCalls: number;
  inboundCalls: number;
  workers: number;
  /** Ingest in processes of its own (the carrier's webhooks round-robin over them); 0 = in this process. */
  ingestProcesses: number;
  /** A worker is SIGKILLed every killEveryMs[0]..killEveryMs[1] ms (0 = never). */
  killEveryMs: [number, number];
  /** Every database connection of every Handset process is cut every dbCutEveryMs[0]..[1] ms (0 = never)… */
  dbCutEveryMs: [number, number];
  /** …for dbCutMs[0]..[1] ms. */
  dbCutMs: [number, number];
  /** How long the load is spread over. */
  loadMs: number;
  behaviour: Partial<Behaviour>;
  /** Outbound messages from a Twilio number, and from the Telnyx number with that one as fallback. */
  twilioMessages: number;
  failoverMessages: number;
  /**
   * A campaign: messages created CAMPAIGN_BATCH at a time through POST /v1/messages/batch
   * (each batch's request retried under its Idempotency-Key), from a number with a
   * sending rate, so batched dispatch and its pace meet the kills and cuts too.
   */
  campaignMessages: number;
  /** Telnyx's REST API refuses connections every flapEveryMs[0]..[1] ms (0 = never), for flapDownMs[0]..[1] ms. */
  flapEveryMs: [number, number];
  flapDownMs: [number, number];
  /** How the Twilio simulator misbehaves. */
  twilioBehaviour: Partial<Behaviour>;
  timeScale: number;
  /**
   * How long the recorded call talks, simulated (× timeScale): its recording must
   * start while it lasts, under the storm's kills, cuts and held answers.
   */
  recordedTalkMs: number;
  databaseUrl: string | null;
  seed: string;
  log: Logger;
  out: (line: string) => void;
}

export const CHAOS_DEFAULTS: Omit<ChaosOptions, 'log' | 'out' | 'databaseUrl'> = {
  outboundMessages: 300,
  inboundMessages: 100,
  outboundCalls: 60,
  inboundCalls: 30,
  workers: 3,
  ingestProcesses: 0,
  killEveryMs: [1500, 4000],
  dbCutEveryMs: [4_000, 10_000],
  dbCutMs: [1_000, 30_000],
  loadMs: 30_000,
  behaviour: {
    duplicateRate: 0.5,
    resendNewIdRate: 0.3,
    contradictionRate: 0.3,
    earlyReceiptRate: 0.3,
    // Lost for good: only what the carrier's REST API can tell again (an inbound
    // call or SMS whose first webhook is lost is lost to anyone).
    dropRates: { 'call.answered': 0.05, 'call.hangup': 0.05, 'message.sent': 0.05, 'message.finalized': 0.05 },
    holdRate: 0.05,
    holdMinMs: 45_000,
    holdMaxMs: 90_000,
  },
  twilioMessages: 100,
  failoverMessages: 150,
  campaignMessages: 300,
  // Short outages: a dial caught by one is retried past it (its policy gives up after a few seconds).
  flapEveryMs: [4_000, 8_000],
  flapDownMs: [500, 1_500],
  twilioBehaviour: {
    duplicateRate: 0.5,
    contradictionRate: 0.3,
    earlyReceiptRate: 0.3,
    dropRate: 0.05,
    holdRate: 0.05,
    holdMinMs: 45_000,
    holdMaxMs: 90_000,
    lostAnswerRate: 0.05,
    serverErrorRate: 0.03,
  },
  timeScale: 0.05,
  recordedTalkMs: 1_200_000,
  seed: 'chaos',
};

export interface ChaosResult {
  /** The campaign's messages created through the batch API, and of them those sent once, at one carrier. */
  campaign: { messages: number; batches: number; sentOnce: number };
  carrier: {
    facts: number;
    webhooks: number;
    duplicates: number;
    resends: number;
    dropped: number;
    held: number;
    sends: number;
    dials: number;
  };
  /** The second carrier, and failover between the two. */
  twilio: {
    sends: number;
    callbacks: number;
    duplicates: number;
    dropped: number;
    held: number;
    answersLost: number;
    serverErrors: number;
  };
  failover: {
    /** Times Telnyx's REST API went down (refusing connections), and messages that failed over to Twilio. */
    telnyxDownWindows: number;
    /**
     * Calls (which stay on Telnyx) missed because every dial of them was refused while Telnyx was
     * down, past the dial's retries: what a well-behaved carrier that was down would give too.
     */
    callsMissedWhileDown: number;
    failedOver: number;
    /** Recorded requests whose outcome was unknown, by how each was settled (open: still unknown at the end). */
    unknown: { total: number; replayed: number; found: number; shownNone: number; open: number };
    /** Sends Telnyx answered from an Idempotency-Key record (a repeat after an unknown outcome). */
    telnyxReplays: number;
    /** Outbound messages by how many acceptances both simulators counted for them. */
    acceptedBy: { none: number; once: number; twice: number };
  };
  /** Carrier events stored from lookups: facts whose webhook never came (or came too late to wait for). */
  reconciledFacts: number;
  /** Inbound SMS and calls whose every webhook attempt failed: never seen by Handset, not compared. */
  lostAtCarrier: number;
  dbCuts: { count: number; seconds: number; maxRecoveryMs: number };
  /** Handset processes that exited without being killed by the run (must be 0). */
  unexpectedExits: number;
  stored: number;
  processed: number;
  customerEvents: number;
  deliveries: { total: number; succeeded: number; receivedRequests: number; redelivered: number };
  workersKilled: number;
  /** Answered calls asked to be recorded and transcribed; record_start commands the carrier acted on; audio stored; transcripts. */
  recordings: { calls: number; startsAtCarrier: number; stored: number; transcripts: number };
  audit: AuditReport;
  /** Differences from what a well-behaved carrier would have produced; empty when none. */
  mismatches: string[];
  seconds: number;
}

// What each persona's messages and calls must end as (see src/sim/personas.ts).
const SMS_PLAN = [
  { to: '+15555550100', status: 'delivered', events: ['message.sent', 'message.delivered'] },
  { to: '+15555550101', status: 'failed', events: ['message.sent', 'message.failed'] },
  { to: '+15555550102', status: 'failed', events: ['message.sent', 'message.failed'] },
  { to: '+15555550103', status: 'failed', events: ['message.failed'] },
  { to: '+15555550104', status: 'sent', events: ['message.sent'] },
  { to: '+15555550105', status: 'sent', events: ['message.sent'] },
];
/**
 * The roles' settings in a chaos run, beside the carriers' own: loopback ports
 * chosen by the system, and every bound (carrier timeouts, a dead worker, the
 * delivery retries, reconciliation) short, so a storm settles in seconds.
 */
export function chaosRoleSettings(): Record<string, string> {
  return {
    HANDSET_HOST: '127.0.0.1',
    HANDSET_API_PORT: '0',
    HANDSET_INGEST_PORT: '0',
    HANDSET_CARRIER_RETRY_AFTER: '1s',
    HANDSET_CARRIER_TIMEOUT: '3s',
    HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS: 'true',
    HANDSET_SECRET_KEY: newSecretKey(),
    HANDSET_WORKER_STALE_AFTER: '3s',
    HANDSET_DELIVERY_RETRY_SCHEDULE: '500ms,1s,2s,5s',
    HANDSET_RECONCILE_INTERVAL: '1s',
    HANDSET_RECONCILE_AFTER: '2s',
    HANDSET_RECONCILE_MESSAGE_AFTER: '3s',
    LOG_LEVEL: 'warn',
  };
}

/**
 * Answers after 1 s and talks recordedTalkMs (by default 1,200 simulated seconds, a
 * minute at the default time scale): long enough for its recording to start under
 * the storm. At 400 (20 s) a
 * record_start reached the carrier 21 s after the answer, once the answer had been
 * held back 5 s and its call.record job caught by kills and cuts for 17 s: the
 * call had ended, and the recording failed as the product should say it did.
 */
const TALKS_LONG = '+15555550131';
const CALL_PLAN: { to: string[]; status: string; events: string[]; record?: boolean }[] = [
  {
    to: ['+15555550110', '+15555550111', '+15555550113'],
    status: 'completed',
    events: ['call.answered', 'call.completed'],
  },
  { to: ['+15555550113'], status: 'completed', events: ['call.answered', 'call.completed'] },
  { to: ['+15555550110', '+15555550112'], status: 'missed', events: ['call.missed'] },
  // Recorded and transcribed: one recording, one transcript (held by the audit's invariant 9).
  { to: [TALKS_LONG], status: 'completed', events: ['call.answered', 'call.completed'], record: true },
];
const INBOUND_RING = ['+15555550111', '+15555550113'];
const OUR_NUMBER = '+13125550170';
const TWILIO_NUMBER = '+13125550172';
const INBOUND_NUMBER = '+13125550171';
const CAMPAIGN_NUMBER = '+13125550173';
/** The campaign's batches, and its number's rate: slower than the storm would send it. */
const CAMPAIGN_BATCH = 100;
const CAMPAIGN_MPS = 20;

export async function runChaos(opts: ChaosOptions): Promise<ChaosResult> {
  const started = Date.now();
  const cleanups: (() => Promise<unknown>)[] = [];
  // Every Handset child process that exits without the run having killed it.
  const ourKills = new WeakSet<ChildProcess>();
  const exits: string[] = [];
  let stopping = false;
  const watchExit = (child: ChildProcess) =>
    child.on('exit', (code, signal) => {
      if (!stopping && !ourKills.has(child)) exits.push(`pid ${child.pid}: exit ${code ?? signal}`);
    });
  const stopChild = (child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM') => {
    ourKills.add(child);
    child.kill(signal);
  };
  const cleanup = async () => {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  };
  try {
    // A database of its own, so a chaos run never touches anyone's data.
    const adminUrl = await runServer(opts.databaseUrl, {
      prefix: 'handset-chaos',
      maxConnections: 300,
      log: opts.log,
      cleanups,
    });
    const dbName = `handset_chaos_${randomBytes(4).toString('hex')}`;
    const databaseUrl = await createDatabase(adminUrl, dbName);
    cleanups.push(() => dropDatabase(adminUrl, dbName));
    const pool = createPool(databaseUrl, { max: 6, applicationName: 'handset-chaos', log: opts.log });
    cleanups.push(() => pool.end());
    await migrate(pool, opts.log);
    // Every Handset process reaches the database through a proxy the run can cut;
    // the run's own reads (quiescence, audit) go straight to it.
    const cutting = opts.dbCutEveryMs[1] > 0;
    let proxy: TcpProxy | null = null;
    let handsetDbUrl = databaseUrl;
    if (cutting) {
      const target = new URL(databaseUrl);
      proxy = await startTcpProxy(target.hostname, Number(target.port));
      cleanups.push(() => proxy!.close());
      target.port = String(proxy.port);
      handsetDbUrl = target.toString();
    }

    const sim = await startSimulator({
      webhookUrl: null,
      timeScale: opts.timeScale,
      seed: opts.seed,
      behaviour: opts.behaviour,
      log: opts.log,
    });
    cleanups.push(() => sim.close());
    sim.setPersona(TALKS_LONG, { call: { answerAfterMs: 1000, talkMs: opts.recordedTalkMs } });
    const twilio = await startTwilioSimulator({
      timeScale: opts.timeScale,
      seed: `${opts.seed}-twilio`,
      behaviour: opts.twilioBehaviour,
      log: opts.log,
    });
    cleanups.push(() => twilio.close());
    const env: Record<string, string> = { ...sim.carrierEnv(), ...twilio.carrierEnv(), ...chaosRoleSettings() };
    const config = loadConfig(env, 'serve');
    const front = await startPlatform({
      config,
      databaseUrl: handsetDbUrl,
      roles: opts.ingestProcesses > 0 ? ['api'] : ['ingest', 'api'],
      log: opts.log,
    });
    cleanups.push(() => front.stop());
    if (opts.ingestProcesses > 0) {
      // Separate ingest processes; the carrier's webhooks alternate between them,
      // so duplicates of one event land on different processes.
      const urls: string[] = [];
      for (let i = 0; i < opts.ingestProcesses; i++) {
        const port = await freePort();
        const child = spawn(
          process.execPath,
          ['--unhandled-rejections=strict', HANDSET_BIN, 'serve', '--roles', 'ingest'],
          {
            env: {
              PATH: process.env.PATH,
              HOME: process.env.HOME,
              ...env,
              DATABASE_URL: handsetDbUrl,
              HANDSET_INGEST_PORT: String(port),
              // Twilio signs the URL it calls: each ingest process is told its own.
              HANDSET_PUBLIC_INGEST_URL: `http://127.0.0.1:${port}`,
            },
            stdio: ['ignore', 'ignore', 'inherit'],
          },
        );
        watchExit(child);
        cleanups.push(async () => stopChild(child));
        urls.push(`http://127.0.0.1:${port}/webhooks/telnyx`);
      }
      for (const u of urls) await waitForHttp(u.replace('/webhooks/telnyx', '/readyz'));
      // Twilio's callbacks go where each send's StatusCallback points: the first ingest process.
      env.HANDSET_PUBLIC_INGEST_URL = urls[0]!.replace('/webhooks/telnyx', '');
      twilio.setWebhookUrl(urls[0]!.replace('/telnyx', '/twilio'));
      let turn = 0;
      sim.setWebhookUrl(urls[0]!);
      const rotate = setInterval(() => sim.setWebhookUrl(urls[++turn % urls.length]!), 50);
      cleanups.push(async () => clearInterval(rotate));
    } else {
      sim.setWebhookUrl(`${front.ingestUrl}/webhooks/telnyx`);
      env.HANDSET_PUBLIC_INGEST_URL = front.ingestUrl!;
      twilio.setWebhookUrl(`${front.ingestUrl}/webhooks/twilio`);
    }

    // The customer: an account, two numbers, an endpoint on a local receiver that
    // answers 200. Its client retries what the API could not answer (503 while the
    // database is cut) with the same Idempotency-Key, as a careful client does.
    const receiver = await startCountingReceiver();
    cleanups.push(() => receiver.close());
    const apiKey = await withTx(
      pool,
      async (tx) => (await apiKeyCreate(tx, (await accountCreate(tx, 'Chaos')).id)).key,
    );
    /** A POST retried under one Idempotency-Key until the API answers 201 (a worker's cut or kill is not its). */
    const post = async <T>(p: string, body: unknown): Promise<T> => {
      const key = randomBytes(12).toString('hex');
      for (let attempt = 0; ; attempt++) {
        try {
          const res = await fetch(front.apiUrl + p, {
            method: 'POST',
            headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'idempotency-key': key },
            body: JSON.stringify(body),
          });
          if (res.status === 201) return (await res.json()) as T;
          if (![409, 429, 503].includes(res.status)) throw new Error(`POST ${p}: ${res.status} ${await res.text()}`);
        } catch (err) {
          if (attempt > 200 || !/fetch failed|ECONN|socket/.test(String((err as Error).cause ?? err))) throw err;
        }
        await sleep(250);
      }
    };
    const api = (p: string, body: unknown) => post<{ id: string }>(p, body);
    await api('/v1/phone_numbers', { number: OUR_NUMBER, carrier: 'telnyx' });
    if (opts.campaignMessages > 0) {
      await api('/v1/phone_numbers', { number: CAMPAIGN_NUMBER, carrier: 'telnyx', mps: CAMPAIGN_MPS });
    }
    await api('/v1/phone_numbers', { number: TWILIO_NUMBER, carrier: 'twilio' });
    await api('/v1/phone_numbers', {
      number: INBOUND_NUMBER,
      carrier: 'telnyx',
      inbound_ring: INBOUND_RING,
      ring_timeout_secs: 5,
    });
    await api('/v1/webhook_endpoints', { url: receiver.url });

    // The workers, in processes of their own, killed and restarted at random.
    const workers = new Set<ChildProcess>();
    const startWorker = () => {
      const child = spawn(
        process.execPath,
        ['--unhandled-rejections=strict', HANDSET_BIN, 'serve', '--roles', 'worker'],
        {
          env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env, DATABASE_URL: handsetDbUrl },
          stdio: ['ignore', 'ignore', 'inherit'],
        },
      );
      workers.add(child);
      watchExit(child);
      child.on('exit', () => workers.delete(child));
    };
    for (let i = 0; i < opts.workers; i++) startWorker();
    let killed = 0;
    let killing = opts.killEveryMs[1] > 0;
    const killer = (async () => {
      while (killing) {
        await sleep(opts.killEveryMs[0] + Math.random() * (opts.killEveryMs[1] - opts.killEveryMs[0]));
        if (!killing) break;
        const victim = [...workers][Math.floor(Math.random() * workers.size)];
        if (!victim) continue;
        ourKills.add(victim);
        victim.kill('SIGKILL');
        killed++;
        startWorker();
      }
    })();
    cleanups.push(async () => {
      killing = false;
      for (const w of workers) stopChild(w, 'SIGKILL');
    });

    // The database cuts: every connection of every Handset process dropped, and
    // new ones refused, for a random while at random moments.
    const cuts = { count: 0, ms: 0, maxRecoveryMs: 0 };
    let cutter: Promise<void> = Promise.resolve();
    let cuttingOn = cutting;
    if (proxy) {
      const p = proxy;
      cutter = (async () => {
        for (;;) {
          await sleep(between(opts.dbCutEveryMs));
          if (!cuttingOn) break;
          const length = between(opts.dbCutMs);
          p.cut();
          cuts.count++;
          await sleep(length);
          p.restore();
          cuts.ms += length;
          void recoveredAfter(pool, new Date()).then((ms) => (cuts.maxRecoveryMs = Math.max(cuts.maxRecoveryMs, ms)));
        }
      })();
    }

    // Telnyx flapping: its REST API refuses connections for a while, now and then.
    let flapping = opts.flapEveryMs[1] > 0;
    let downWindows = 0;
    /** When Telnyx was down: [from, to] in ms (a call dialed in one may never reach it). */
    const outages: [number, number][] = [];
    const flapper = (async () => {
      while (flapping) {
        await sleep(between(opts.flapEveryMs));
        if (!flapping) break;
        await sim.setDown('refuse');
        downWindows++;
        const from = Date.now();
        await sleep(between(opts.flapDownMs));
        await sim.setDown('up');
        outages.push([from, Date.now()]);
      }
    })();
    cleanups.push(async () => {
      flapping = false;
    });

    // The storm.
    opts.out(
      `storm: ${opts.outboundMessages} SMS out (and a campaign of ${opts.campaignMessages} in batches of ${CAMPAIGN_BATCH} at ${CAMPAIGN_MPS} mps), ${opts.inboundMessages} in, ${opts.outboundCalls} calls out, ${opts.inboundCalls} in; ${opts.workers} workers, one SIGKILLed every ${opts.killEveryMs.join('–')} ms`,
    );
    const expected = new Map<string, { status: string; events: string[] }>();
    const inbound: { from: string; kind: 'sms' | 'call' }[] = [];
    const work: (() => Promise<void>)[] = [];
    for (let i = 0; i < opts.outboundMessages; i++) {
      const plan = SMS_PLAN[i % SMS_PLAN.length]!;
      work.push(async () => {
        const m = await api('/v1/messages', { from: OUR_NUMBER, to: plan.to, body: `chaos ${i} ${'é'.repeat(i % 3)}` });
        expected.set(m.id, plan);
      });
    }
    for (let i = 0; i < opts.twilioMessages + opts.failoverMessages; i++) {
      const plan = SMS_PLAN[i % SMS_PLAN.length]!;
      const viaTwilio = i < opts.twilioMessages;
      work.push(async () => {
        const m = await api('/v1/messages', {
          from: viaTwilio ? TWILIO_NUMBER : OUR_NUMBER,
          to: plan.to,
          body: `chaos ${viaTwilio ? 'twilio' : 'failover'} ${i}`,
          ...(viaTwilio ? {} : { fallback_from: TWILIO_NUMBER }),
        });
        expected.set(m.id, plan);
      });
    }
    for (let first = 0; first < opts.campaignMessages; first += CAMPAIGN_BATCH) {
      const plans = Array.from(
        { length: Math.min(CAMPAIGN_BATCH, opts.campaignMessages - first) },
        (_, i) => SMS_PLAN[(first + i) % SMS_PLAN.length]!,
      );
      work.push(async () => {
        const { data } = await post<{ data: { index: number; message?: { id: string }; error?: unknown }[] }>(
          '/v1/messages/batch',
          { messages: plans.map((plan, i) => ({ from: CAMPAIGN_NUMBER, to: plan.to, body: `campaign ${first + i}` })) },
        );
        for (const item of data) {
          if (!item.message) throw new Error(`campaign item ${first + item.index}: ${JSON.stringify(item.error)}`);
          expected.set(item.message.id, plans[item.index]!);
        }
      });
    }
    for (let i = 0; i < opts.outboundCalls; i++) {
      const plan = CALL_PLAN[i % CALL_PLAN.length]!;
      work.push(async () => {
        const c = await api('/v1/calls', {
          from: OUR_NUMBER,
          to: plan.to,
          ring_timeout_secs: 5,
          ...(plan.record ? { record: true, transcribe: true } : {}),
        });
        expected.set(c.id, plan);
      });
    }
    for (let i = 0; i < opts.inboundMessages; i++) {
      const from = `+1415600${String(i).padStart(4, '0')}`;
      work.push(async () => {
        sim.injectInboundSms({ from, to: OUR_NUMBER, text: `inbound ${i}` });
        inbound.push({ from, kind: 'sms' });
      });
    }
    for (let i = 0; i < opts.inboundCalls; i++) {
      const from = `+1415700${String(i).padStart(4, '0')}`;
      work.push(async () => {
        sim.injectInboundCall({ from, to: INBOUND_NUMBER });
        inbound.push({ from, kind: 'call' });
      });
    }
    shuffle(work);
    const gap = opts.loadMs / Math.max(1, work.length);
    await Promise.all(
      work.map(async (w, i) => {
        await sleep(i * gap);
        await w();
      }),
    );

    opts.out(`storm sent after ${Math.round((Date.now() - started) / 1000)} s; cuts stop, waiting for quiescence…`);
    cuttingOn = false;
    // Telnyx keeps flapping while messages that may fail over still wait to be sent (workers
    // being killed and restarted send them late), for at most a minute more.
    const flapUntil = Date.now() + 60_000;
    while (
      flapping &&
      Date.now() < flapUntil &&
      Number(
        (
          await pool.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM messages WHERE status = 'queued' AND fallback_carrier IS NOT NULL`,
          )
        ).rows[0]!.n,
      ) > 0
    )
      await sleep(500);
    flapping = false;
    await cutter; // a cut under way runs its length
    await flapper;
    proxy?.restore();
    await quiescence(pool, { idle: async () => void (await Promise.all([sim.idle(), twilio.idle()])) }, opts.out);
    opts.out(`quiescent after ${Math.round((Date.now() - started) / 1000)} s`);
    killing = false;
    await killer;
    for (const w of workers) stopChild(w);
    await sleep(500);

    const audit = await runAudit(pool, {
      graceSeconds: 0,
      reconcile: {
        intervalMs: config.reconcileIntervalMs,
        afterMs: config.reconcileAfterMs,
        messageAfterMs: config.reconcileMessageAfterMs,
      },
    });
    const acknowledged = (from: string, type: string) =>
      sim.webhooks.some(
        (w) => w.eventType === type && w.status !== null && w.status < 300 && w.body.includes(`"${from}"`),
      );
    const reached = inbound.filter(({ from, kind }) =>
      acknowledged(from, kind === 'sms' ? 'message.received' : 'call.initiated'),
    );
    // The legs the carrier saved a recording of (told, or lost on the way): a recorded
    // call whose worker could not act before it ended has none, and says so.
    const savedAtCarrier = new Set(
      [...sim.webhooks, ...sim.dropped]
        .filter((w) => w.eventType === 'call.recording.saved')
        .map((w) => String(JSON.parse(w.body).data.payload.call_control_id)),
    );
    const compared = await compare(
      pool,
      expected,
      reached,
      (opts.behaviour.contradictionRate ?? 0) > 0 || (opts.twilioBehaviour.contradictionRate ?? 0) > 0,
      savedAtCarrier,
      outages,
    );
    const { mismatches } = compared;
    // Every outbound message counted at both carriers: once, or never for a send refused at the carrier.
    const telnyxAccepted = new Map<string, number>();
    for (const r of sim.requests) {
      if (r.path === '/v2/messages' && r.status === 200 && !r.replayed && r.idempotencyKey)
        telnyxAccepted.set(r.idempotencyKey, (telnyxAccepted.get(r.idempotencyKey) ?? 0) + 1);
    }
    const twilioAccepted = twilio.acceptedByMarker();
    const acceptedBy = { none: 0, once: 0, twice: 0 };
    for (const [id, plan] of expected) {
      if (!id.startsWith('msg_')) continue;
      const n = (telnyxAccepted.get(id) ?? 0) + (twilioAccepted.get(id) ?? 0);
      if (n === 0) acceptedBy.none++;
      else if (n === 1) acceptedBy.once++;
      else acceptedBy.twice++;
      const want = plan.events.includes('message.sent') ? 1 : 0;
      if (n !== want) mismatches.push(`${id}: accepted by ${n} carrier(s), expected ${want}`);
    }
    const settledSends = (
      await pool.query<{ outcome: string; detail: string }>(
        `SELECT outcome, detail FROM message_sends WHERE detail ~ '; |has it|lists it|shows no such' OR outcome IN ('pending', 'unknown')`,
      )
    ).rows;
    const unknown = {
      total: settledSends.length,
      replayed: settledSends.filter((x) => x.outcome === 'accepted' && /; taken$/.test(x.detail ?? '')).length,
      found: settledSends.filter((x) => x.outcome === 'accepted' && /has it|lists it/.test(x.detail ?? '')).length,
      shownNone: settledSends.filter((x) => x.outcome === 'not_accepted' && /shows no such/.test(x.detail ?? ''))
        .length,
      open: settledSends.filter((x) => x.outcome === 'pending' || x.outcome === 'unknown').length,
    };
    const twilioState = twilio.state() as { counts: Record<string, number> };
    const q = async (sql: string) => Number((await pool.query<{ n: number }>(sql)).rows[0]!.n);
    const counts = sim.counts;
    const campaignIds = (
      await pool.query<{ id: string }>('SELECT id FROM messages WHERE from_number = $1', [CAMPAIGN_NUMBER])
    ).rows.map((r) => r.id);
    return {
      campaign: {
        messages: campaignIds.length,
        batches: Math.ceil(opts.campaignMessages / CAMPAIGN_BATCH),
        sentOnce: campaignIds.filter((id) => (telnyxAccepted.get(id) ?? 0) === 1).length,
      },
      twilio: {
        sends: twilio.creates.filter((c) => c.sid !== null).length,
        callbacks: twilioState.counts['attempts'] ?? 0,
        duplicates: twilioState.counts['duplicates'] ?? 0,
        dropped: twilioState.counts['dropped'] ?? 0,
        held: twilioState.counts['held'] ?? 0,
        answersLost: twilioState.counts['answersLost'] ?? 0,
        serverErrors: twilio.creates.filter((c) => c.status >= 500).length,
      },
      failover: {
        telnyxDownWindows: downWindows,
        callsMissedWhileDown: compared.missedWhileDown,
        failedOver: await q('SELECT count(*)::int AS n FROM messages WHERE failover_reason IS NOT NULL'),
        unknown,
        telnyxReplays: counts.replays,
        acceptedBy,
      },
      carrier: {
        facts: counts.events,
        webhooks: counts.attempts,
        duplicates: counts.duplicates,
        resends: counts.resends,
        dropped: counts.dropped,
        held: counts.held,
        sends: sim.requests.filter((r) => r.path === '/v2/messages' && r.status === 200 && !r.replayed).length,
        dials: sim.requests.filter((r) => r.path === '/v2/calls' && r.status === 200 && !r.deduplicated && !r.replayed)
          .length,
      },
      reconciledFacts: await q(
        `SELECT count(*)::int AS n FROM carrier_events WHERE carrier_event_id LIKE 'reconcile:%'`,
      ),
      lostAtCarrier: inbound.length - reached.length,
      dbCuts: { count: cuts.count, seconds: Math.round(cuts.ms / 100) / 10, maxRecoveryMs: cuts.maxRecoveryMs },
      unexpectedExits: exits.length,
      stored: await q('SELECT count(*)::int AS n FROM carrier_events'),
      processed: await q('SELECT count(*)::int AS n FROM carrier_events WHERE processed_at IS NOT NULL'),
      customerEvents: await q('SELECT count(*)::int AS n FROM outbound_events'),
      deliveries: {
        total: await q('SELECT count(*)::int AS n FROM webhook_deliveries'),
        succeeded: await q(`SELECT count(*)::int AS n FROM webhook_deliveries WHERE status = 'succeeded'`),
        receivedRequests: receiver.requests,
        redelivered: receiver.requests - receiver.distinct.size,
      },
      workersKilled: killed,
      recordings: {
        // Answered ones: a recorded call missed while Telnyx was down had nothing to record.
        calls: await q('SELECT count(*)::int AS n FROM calls WHERE record AND answered_at IS NOT NULL'),
        stored: await q(`SELECT count(*)::int AS n FROM recordings WHERE audio_status = 'stored'`),
        transcripts: await q(`SELECT count(*)::int AS n FROM recordings WHERE transcription_status = 'completed'`),
        startsAtCarrier: sim.requests.filter((r) => r.path.endsWith('/actions/record_start') && !r.deduplicated).length,
      },
      audit,
      mismatches,
      seconds: Math.round((Date.now() - started) / 1000),
    };
  } finally {
    stopping = true;
    await cleanup();
  }
}

/**
 * How long after `restoredAt` until no job that a cut caught (locked before the
 * database came back) is still locked: the jobs whose outcome could not be
 * recorded have been run again.
 */
async function recoveredAfter(pool: pg.Pool, restoredAt: Date): Promise<number> {
  for (;;) {
    const { rows } = await pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM graphile_worker.jobs WHERE locked_at IS NOT NULL AND locked_at < $1',
      [restoredAt],
    );
    if (rows[0]!.n === 0) return Date.now() - restoredAt.getTime();
    await sleep(250);
  }
}

const between = ([min, max]: [number, number]) => min + Math.random() * (max - min);

/**
 * Settled: the simulator has nothing pending, no job is due, every delivery is
 * terminal, every carrier event is processed except receipts for a carrier id
 * that matches no message (the second send of a message whose worker was killed
 * inside the send window; they are retried for a while and then recorded as
 * errors), every sent message has been asked about at least once, and all of
 * that holds twice in a row.
 *
 * Why the last: a sent message whose receipt the carrier dropped for good is
 * settled by asking the carrier once its bound (HANDSET_RECONCILE_MESSAGE_AFTER)
 * has passed. A message dispatched in the last seconds of the storm is still
 * inside that bound when everything else is calm; comparing it then would count
 * a wait the product is allowed as a difference. The simulator finalizes a
 * message long before the first ask, so one ask is all a message needs.
 */
export async function quiescence(
  pool: pg.Pool,
  sim: { idle(): Promise<void> },
  out: (l: string) => void,
  withinMs = 600_000,
): Promise<void> {
  let calm = 0;
  let last = '';
  const deadline = Date.now() + withinMs;
  while (calm < 2) {
    if (Date.now() > deadline) throw new Error(`no quiescence within ${withinMs / 1000} s; still busy: ${last}`);
    await sim.idle();
    const { rows } = await pool.query<{
      jobs: number;
      deliveries: number;
      events: number;
      calls: number;
      messages: number;
      'sent, not asked yet': number;
      'recording not saved': number;
      'audio not fetched': number;
      'not transcribed': number;
    }>(`
      SELECT (SELECT count(*) FROM graphile_worker.jobs WHERE run_at <= now() AND attempts < max_attempts AND task_identifier <> 'reconcile') AS jobs,
             (SELECT count(*) FROM webhook_deliveries WHERE status = 'pending') AS deliveries,
             (SELECT count(*) FROM carrier_events ce WHERE processed_at IS NULL
               AND NOT (ce.event_type IN ('message.sent', 'message.finalized')
                        AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.carrier_message_id = ce.payload->'data'->'payload'->>'id'))) AS events,
             (SELECT count(*) FROM calls WHERE status IN ('ringing', 'in_progress')) AS calls,
             (SELECT count(*) FROM messages WHERE status IN ('queued', 'scheduled')) AS messages,
             (SELECT count(*) FROM messages WHERE status = 'sent' AND checked_at IS NULL) AS "sent, not asked yet",
             (SELECT count(*) FROM calls c WHERE c.record AND c.status = 'completed' AND c.recording_error IS NULL
                 AND NOT EXISTS (SELECT 1 FROM recordings r WHERE r.call_id = c.id)) AS "recording not saved",
             (SELECT count(*) FROM recordings WHERE audio_status = 'pending') AS "audio not fetched",
             (SELECT count(*) FROM recordings WHERE transcription_status = 'pending') AS "not transcribed"`);
    const busy = rows[0]!;
    const summary = Object.entries(busy)
      .filter(([, v]) => Number(v) > 0)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ');
    if (summary && summary !== last) {
      out(`  still busy: ${summary}`);
      // What the waiting events are waiting for, as their rows say.
      if (busy.events > 0) {
        const { rows: waiting } = await pool.query(
          `SELECT event_type, attempts, run_after, error FROM carrier_events WHERE processed_at IS NULL ORDER BY id LIMIT 3`,
        );
        for (const w of waiting) {
          out(
            `    ${w.event_type}: ${w.attempts} runs, next ${w.run_after?.toISOString() ?? 'now'}: ${w.error ?? '-'}`,
          );
        }
      }
    }
    last = summary;
    calm = summary === '' ? calm + 1 : 0;
    await sleep(1000);
  }
}

/** Customer events and final states against what a well-behaved carrier would have produced. */
async function compare(
  pool: pg.Pool,
  expected: Map<string, { status: string; events: string[] }>,
  inbound: { from: string; kind: 'sms' | 'call' }[],
  contradictions: boolean,
  savedAtCarrier: ReadonlySet<string>,
  outages: readonly [number, number][] = [],
): Promise<{ mismatches: string[]; missedWhileDown: number }> {
  // A contradiction ("delivery_failed" after "delivered", under a new id) may be
  // processed first when two workers race: the first terminal word processed wins.
  // Either way there is exactly one terminal status and one terminal event.
  const terminal = (s: string) => (contradictions ? s.replace(/^(message\.)(delivered|failed)$/, '$1terminal') : s);
  const status = (s: string) => (contradictions && (s === 'delivered' || s === 'failed') ? 'terminal' : s);
  const out: string[] = [];
  const { rows } = await pool.query<{ id: string; status: string; events: string[] | null }>(`
    SELECT r.id, r.status, (SELECT array_agg(type ORDER BY type) FROM outbound_events e WHERE e.subject_id = r.id) AS events
      FROM (SELECT id, status FROM messages UNION ALL SELECT id, status FROM calls) r`);
  const byId = new Map(rows.map((r) => [r.id, r]));
  // A completed recorded call of which the carrier saved no recording must announce call.recording.failed:
  // judged from the carrier's record alone, not from what Handset concluded.
  const { rows: unrecorded } = await pool.query<{ id: string; refs: string[] }>(`
    SELECT c.id, array_agg(l.carrier_ref) FILTER (WHERE l.carrier_ref IS NOT NULL) || array_remove(ARRAY[c.caller_ref], NULL) AS refs
      FROM calls c LEFT JOIN call_legs l ON l.call_id = c.id
     WHERE c.record AND c.status = 'completed' GROUP BY c.id`);
  const noRecording = new Set(unrecorded.filter((c) => !c.refs.some((r) => savedAtCarrier.has(r))).map((c) => c.id));
  // A call whose every leg was never dialed (the carrier unavailable past the dial's retries) while Telnyx was
  // down is missed, as it must be: calls do not fail over.
  const { rows: undialed } = await pool.query<{ id: string; created: Date; ended: Date }>(`
    SELECT c.id, c.created_at AS created, c.ended_at AS ended FROM calls c
     WHERE c.status = 'missed' AND c.direction = 'outbound'
       AND NOT EXISTS (SELECT 1 FROM call_legs l WHERE l.call_id = c.id
                        AND (l.dialed_at IS NOT NULL OR l.hangup_cause IS DISTINCT FROM 'carrier_unavailable'))`);
  const missedWhileDown = new Set(
    undialed
      .filter((c) => outages.some(([from, to]) => from <= c.ended.getTime() && to >= c.created.getTime()))
      .map((c) => c.id),
  );
  for (const [id, want] of expected) {
    const got = byId.get(id);
    const wantEvents = [...want.events, ...(noRecording.has(id) ? ['call.recording.failed'] : [])]
      .map(terminal)
      .sort()
      .join(',');
    const gotEvents = (got?.events ?? []).map(terminal).sort().join(',');
    if (missedWhileDown.has(id) && got?.status === 'missed' && gotEvents === 'call.missed') continue;
    if (!got || status(got.status) !== status(want.status) || gotEvents !== wantEvents) {
      const story = id.startsWith('call_') ? (await callStory(pool, id)).map((l) => `\n      ${l}`).join('') : '';
      out.push(
        `${id}: expected ${want.status} [${wantEvents}], got ${got?.status ?? 'nothing'} [${gotEvents}]${story}`,
      );
    }
  }
  for (const { from, kind } of inbound) {
    const table = kind === 'sms' ? 'messages' : 'calls';
    const want = kind === 'sms' ? 'message.received' : 'call.completed,call.answered,call.initiated';
    const { rows: found } = await pool.query<{ id: string; events: string[] | null }>(
      `SELECT r.id, (SELECT array_agg(type ORDER BY type) FROM outbound_events e WHERE e.subject_id = r.id) AS events
         FROM ${table} r WHERE r.from_number = $1`,
      [from],
    );
    const sorted = want.split(',').sort().join(',');
    if (found.length !== 1 || (found[0]!.events ?? []).join(',') !== sorted) {
      out.push(`inbound ${kind} from ${from}: expected one with [${sorted}], got ${JSON.stringify(found)}`);
    }
  }
  return { mismatches: out, missedWhileDown: missedWhileDown.size };
}

/** What happened to a call, for a difference to be understood: its legs and the carrier events about them. */
async function callStory(pool: pg.Pool, callId: string): Promise<string[]> {
  const t = (d: Date | null) => d?.toISOString().slice(11, 23) ?? '-';
  const { rows: calls } = await pool.query(`SELECT status, ring_plan, created_at, ended_at FROM calls WHERE id = $1`, [
    callId,
  ]);
  const lines: string[] = calls.map(
    (c) => `call ${c.status}, plan ${JSON.stringify(c.ring_plan)}, created ${t(c.created_at)} ended ${t(c.ended_at)}`,
  );
  const { rows: legs } = await pool.query(
    `SELECT position, to_number, status, hangup_cause, carrier_ref, reconciled, dialed_at, answered_at, ended_at
       FROM call_legs WHERE call_id = $1 ORDER BY position`,
    [callId],
  );
  for (const l of legs) {
    lines.push(
      `leg ${l.position} to ${l.to_number} ${l.status} (${l.hangup_cause ?? '-'}) dialed ${t(l.dialed_at)} answered ${t(l.answered_at)} ended ${t(l.ended_at)} reconciled [${l.reconciled}]`,
    );
    if (!l.carrier_ref) continue;
    const { rows: events } = await pool.query(
      `SELECT event_type, carrier_event_id, created_at, processed_at, error FROM carrier_events
        WHERE subject = $1 ORDER BY created_at`,
      [l.carrier_ref],
    );
    for (const e of events) {
      lines.push(
        `  ${e.event_type} ${String(e.carrier_event_id).slice(0, 24)} stored ${t(e.created_at)} processed ${t(e.processed_at)}${e.error ? ` (${e.error})` : ''}`,
      );
    }
  }
  return lines;
}

export async function startCountingReceiver() {
  const distinct = new Set<string>();
  const state = { requests: 0, distinct, url: '', close: async () => {} };
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      state.requests++;
      distinct.add(String(req.headers['webhook-id']));
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
  state.close = () => new Promise<void>((resolve) => server.close(() => resolve()));
  return state;
}

export function chaosTable(r: ChaosResult): string {
  const rows: [string, string | number][] = [
    ['carrier facts told', r.carrier.facts],
    ['carrier webhooks sent', r.carrier.webhooks],
    ['  duplicates (same event id)', r.carrier.duplicates],
    ['  re-sent under a new event id', r.carrier.resends],
    ['  lost for good / held back', `${r.carrier.dropped} / ${r.carrier.held}`],
    ['facts learned by asking the carrier', r.reconciledFacts],
    ['inbound the carrier gave up on (not compared)', r.lostAtCarrier],
    ['carrier events stored (distinct ids)', r.stored],
    ['carrier events processed', r.processed],
    ['messages sent to the carrier / dials', `${r.carrier.sends} / ${r.carrier.dials}`],
    [
      `campaign: messages (batches) / sent once at ${CAMPAIGN_MPS} mps`,
      `${r.campaign.messages} (${r.campaign.batches}) / ${r.campaign.sentOnce}`,
    ],
    ['twilio: messages sent / callbacks', `${r.twilio.sends} / ${r.twilio.callbacks}`],
    ['  duplicates / lost / held', `${r.twilio.duplicates} / ${r.twilio.dropped} / ${r.twilio.held}`],
    ['  answers lost / 5xx', `${r.twilio.answersLost} / ${r.twilio.serverErrors}`],
    ['telnyx down windows / messages failed over', `${r.failover.telnyxDownWindows} / ${r.failover.failedOver}`],
    ['  calls missed: never dialed while telnyx was down', r.failover.callsMissedWhileDown],
    [
      'unknown outcomes: replayed / found / shown none / open',
      `${r.failover.unknown.total}: ${r.failover.unknown.replayed} / ${r.failover.unknown.found} / ${r.failover.unknown.shownNone} / ${r.failover.unknown.open}`,
    ],
    ['telnyx replays of a repeated key', r.failover.telnyxReplays],
    [
      'outbound messages accepted by 0 / 1 / 2+ carriers',
      `${r.failover.acceptedBy.none} / ${r.failover.acceptedBy.once} / ${r.failover.acceptedBy.twice}`,
    ],
    ['customer events', r.customerEvents],
    ['deliveries (succeeded / total)', `${r.deliveries.succeeded} / ${r.deliveries.total}`],
    ['receiver requests (same id again)', `${r.deliveries.receivedRequests} (${r.deliveries.redelivered})`],
    ['worker processes SIGKILLed', r.workersKilled],
    [
      'recorded calls: record_start / stored / transcripts',
      `${r.recordings.calls}: ${r.recordings.startsAtCarrier} / ${r.recordings.stored} / ${r.recordings.transcripts}`,
    ],
    ['database cuts (seconds in all)', `${r.dbCuts.count} (${r.dbCuts.seconds})`],
    ['  longest until caught jobs re-ran, ms', r.dbCuts.maxRecoveryMs],
    ['processes that exited on their own', r.unexpectedExits],
    ['audit violations', r.audit.checks.reduce((n, c) => n + c.violations, 0)],
    ['differences from a well-behaved carrier', r.mismatches.length],
    ['seconds', r.seconds],
  ];
  const w = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(w)}  ${v}`).join('\n');
}

export { formatAuditReport };

async function waitForHttp(url: string) {
  for (let i = 0; i < 200; i++) {
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  throw new Error(`${url} did not come up`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function shuffle<T>(a: T[]) {
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
}
