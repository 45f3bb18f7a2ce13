// The batched dispatcher: takes the head of the dispatch line many messages at a
// time and sends them, instead of one job per message. One transaction claims a
// batch (FOR UPDATE SKIP LOCKED, in the line's fair order, so dispatchers in many
// processes take disjoint batches), clears it against the opt-out list under the
// pairs' shared locks and leases it; each message then goes through the same
// sendThrough as a dispatch job (dispatch.ts: keys, failover, unknown outcomes),
// at most `concurrency` at once over the carrier client's keep-alive connections,
// and what the carrier took is recorded many messages to a transaction.
//
// A message whose send must wait or be asked again (an unknown outcome, a carrier
// marked down) leaves the batch for a dispatch job of its own, as it always did.
// A dispatcher that dies, or loses the database, mid-batch leaves its messages
// leased and queued: once the lease has run out a sweep gives each a dispatch job,
// which asks the carrier again with the same key and bytes (or, at a carrier
// without idempotent sends, looks for the message before any resend). A live
// dispatcher renews the leases of the messages it holds (they may wait for a
// request slot, their number's pace, a slow carrier), and makes a request only
// while the lease has a carrier timeout and a margin left: so when a lease runs
// out, no request of the dispatcher's for that message can still be under way.
//
// It wakes on the NOTIFY a create sends (MESSAGE_LINE_CHANNEL), on a poll, and
// whenever a batch it sends drops below half, so a message joining the line
// waits for at most the rest of one batch's head.

import { setTimeout as sleep } from 'node:timers/promises';
import { Listener } from '../db/listen.js';
import type pg from 'pg';
import { together, type Tx, withTx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys } from '../jobs/keys.js';
import { HandOff, type HandOffTaker, handingOff } from '../delivery/handoff.js';
import { pairLocksShared } from '../optouts/optouts.sql.js';
import {
  type DispatchDeps,
  announceFailed,
  type DispatchOutcome,
  EXPIRED,
  fail,
  type Hand,
  OPTED_OUT,
  type RecordSent,
  recordSent,
  sendThrough,
} from './dispatch.js';
import {
  type MessageRow,
  messagesClaimScheduled,
  messagesClearForDispatch,
  messagesExpireInLine,
  messagesLeaseExpired,
  messagesLineHead,
  messageReturnToLine,
  messagesLeaseRenew,
} from './messages.sql.js';
import { carriersThrottled } from '../carrier/health.sql.js';
import { numbersPaced, type PacedNumber, paceTake } from '../numbers/pace.sql.js';

/** Where a create (or a scheduled message falling due) says the line has something new. */
export const MESSAGE_LINE_CHANNEL = 'handset_message_line';

/** Told in the creating transaction: the dispatchers wake once it commits. */
export async function notifyLine(tx: Tx): Promise<void> {
  await tx.query({ name: 'message_line_notify', text: `SELECT pg_notify('${MESSAGE_LINE_CHANNEL}', '')` });
}

export interface DispatcherOptions {
  deps: DispatchDeps;
  /** Messages claimed in one statement. */
  batchSize: number;
  /** Carrier requests in flight at once. */
  concurrency: number;
  /** How long a claimed message is this dispatcher's before the sweep hands it to a job; renewed while held. */
  leaseMs: number;
  /** The longest a carrier request can take: a request starts only while the lease has this, and a margin, left. */
  carrierTimeoutMs: number;
  pollMs?: number;
  /** This worker's delivery relay: the events a record writes are handed to it once committed. */
  handOff?: HandOffTaker;
  /**
   * Where what the carriers took is recorded: a pipelining pool (db/pool.ts), so a
   * batch's messages are written side by side in a handful of round trips. The
   * dispatch pool when not given.
   */
  recordPool?: pg.Pool;
}

export interface Dispatcher {
  /** Stops claiming and waits for the messages in hand to be sent and recorded. */
  stop(): Promise<void>;
}

/** A message claimed from the line, its slot when its number has a sending rate (null: at once), and its lease. */
interface Claimed {
  m: MessageRow;
  /** The number's rate, and when the slot taken for this message comes (Date.now() ms). */
  paced: { pace: PacedNumber; at: number } | null;
  /** Until when the claim leased it (ms, the dispatcher's clock). */
  leaseUntil: number;
}

/** How far ahead a paced number's slots are taken: a claim takes at most this long of its sending. */
const PACE_AHEAD_MS = 1_000;
/**
 * How late a paced send may go after its slot: half a slot, so that no second sees
 * more than one send above the rate, but at least this long (timers and a busy
 * event loop are that coarse). Later than that, it takes a new slot instead.
 */
const SLOT_LATE_FLOOR_MS = 25;
/** New slots a late send takes at most before it goes anyway: a machine this far behind still sends. */
const SLOT_RETAKES = 5;

/** What a claim takes from the head while the hand is full, so a newcomer in the current round is not kept waiting. */
const HEAD_CLAIM = 4;
/** The least wait after a claim that found nothing to take. */
const EMPTY_CLAIM_PAUSE_MS = 20;

/** Messages claimed at once per worker process: enough to amortize the claim, few enough that a newcomer waits little. */
export const DISPATCH_BATCH = 64;
/** What a request needs of its lease beyond the carrier timeout: the processes' clocks and a renewal's round trip. */
const LEASE_MARGIN_MS = 1_000;

/** The lease ran short before the request: the message is left to its lease, and the sweep. */
class LeaseShortError extends Error {
  override name = 'LeaseShortError';
}
/** Sends recorded in one transaction, at most. */
const RECORD_BATCH = 100;
const POLL_MS = 1_000;

export function startDispatcher(opts: DispatcherOptions): Dispatcher {
  const { deps } = opts;
  const log = deps.log;
  const clock = deps.now ?? (() => new Date());
  const pollMs = opts.pollMs ?? POLL_MS;
  let stopped = false;
  let notified = false;
  let wake: (() => void) | null = null;
  const poke = () => {
    notified = true;
    wake?.();
  };
  /** Messages claimed and not yet answered by the carrier (nor failed, nor handed to a job). */
  let inHand = 0;
  /** Every message held, from its claim until its send ends: until when its lease is ours (ms, our clock; 0: lost). */
  const held = new Map<string, number>();
  const renewal = setInterval(() => {
    if (held.size === 0) return;
    const now = clock();
    const until = new Date(now.getTime() + opts.leaseMs);
    const asked = new Map(held);
    messagesLeaseRenew(deps.pool, [...asked.keys()], until, now).then(
      (renewed) => {
        const kept = new Set(renewed);
        // Only what no newer claim or renewal has changed meanwhile (a message put back and taken again).
        for (const [id, was] of asked) if (held.get(id) === was) held.set(id, kept.has(id) ? until.getTime() : 0);
      },
      (err: Error) => log.warn({ err: err.message, messages: asked.size }, 'could not renew dispatch leases'),
    );
  }, opts.leaseMs / 3);
  renewal.unref();
  const inFlight = new Set<Promise<unknown>>();
  let running = 0;
  /** Sends waiting for a request slot, with their place in the line: the earliest place goes first. */
  const slotWaiters: { rank: number; wake: () => void }[] = [];

  const listener = new Listener({
    pool: deps.pool,
    channel: MESSAGE_LINE_CHANNEL,
    applicationName: 'handset-dispatch-listen',
    onNotification: poke,
    onUp: poke,
    onDown: (why, _wasUp, retryInMs) =>
      log.debug({ err: why, retryInMs }, 'message line listener lost: the dispatcher polls until it is back'),
  });
  void listener.start();

  const recorder = new SentRecorder({ ...deps, pool: opts.recordPool ?? deps.pool }, opts.handOff, () => poke());
  const hand: Hand = {
    record: recorder.record,
    putBack: async (m) => {
      await messageReturnToLine(deps.pool, m.id);
    },
  };

  /**
   * A request slot, in the line's fair order rather than the order of claiming: a
   * message another account sent during a campaign is claimed from the head by a few
   * (HEAD_CLAIM) and goes before the campaign's messages already in hand.
   */
  async function slot(rank: number): Promise<void> {
    while (running >= opts.concurrency) await new Promise<void>((wake) => slotWaiters.push({ rank, wake }));
    running++;
  }
  function release() {
    running--;
    if (slotWaiters.length === 0) return;
    let first = 0;
    for (let i = 1; i < slotWaiters.length; i++) if (slotWaiters[i]!.rank < slotWaiters[first]!.rank) first = i;
    slotWaiters.splice(first, 1)[0]!.wake();
  }

  function idle(): Promise<void> {
    if (notified || stopped) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, pollMs);
      function done() {
        clearTimeout(timer);
        wake = null;
        resolve();
      }
      wake = done;
    });
  }

  /**
   * Sends one claimed message, at its slot when its number is paced. Its request
   * slot, and its place in what the next claim waits for, are given up as soon as
   * the carrier has answered (recording it is the recorder's, many at a time), or
   * when its send ends otherwise. A paced message takes no request slot (its
   * rate bounds it) and does not count against the next claim.
   */
  function send({ m, paced, leaseUntil }: Claimed): void {
    const counted = paced === null;
    if (counted) inHand++;
    held.set(m.id, leaseUntil);
    let answered = false;
    const done = () => {
      if (answered || !counted) return;
      answered = true;
      release();
      inHand--;
      if (inHand <= opts.batchSize / 2) poke();
    };
    const own: Hand = {
      ...hand,
      record: (...a) => {
        done();
        return hand.record(...a);
      },
      // The slot is waited for right before the request, after the checks that precede it; then the lease
      // must outlast the request.
      turn: async () => {
        if (paced) await awaitSlot(paced.pace, paced.at);
        const left = (held.get(m.id) ?? 0) - clock().getTime();
        if (left < opts.carrierTimeoutMs + LEASE_MARGIN_MS) {
          throw new LeaseShortError(`${Math.max(0, left)} ms of its lease left, less than a request may take`);
        }
      },
    };
    const p = (async () => {
      // A paced number's requests are bounded by its rate already: they take no request slot.
      if (counted) await slot(m.dispatch_rank ?? 0);
      try {
        await sendThrough(deps, m, 1, own);
      } catch (err) {
        // Its lease keeps it: the sweep hands it to a job once it runs out.
        log.warn({ messageId: m.id, err: (err as Error).message }, 'batched send left to its lease');
      } finally {
        held.delete(m.id);
        done();
      }
    })();
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  }

  /**
   * Waits for a paced send's slot. Woken later than it may go (a paused process, a
   * saturated machine), it does not go beside the sends of the slots that followed
   * its own: it takes a new one, at the end of its number's pace or at once if the
   * pace has fallen behind.
   */
  async function awaitSlot(n: PacedNumber, slotAt: number): Promise<void> {
    const mayBeLate = Math.max(SLOT_LATE_FLOOR_MS, 500 / n.mps);
    for (let at = slotAt, retakes = 0; ; retakes++) {
      await sleep(Math.max(0, at - Date.now()));
      const late = Date.now() - at;
      if (late <= mayBeLate || retakes === SLOT_RETAKES) return;
      at = (await paceTake(deps.pool, n, 1)).first.getTime();
      log.debug({ number: n.number, lateMs: late }, 'paced send woke after its slot: took another');
    }
  }

  /** Due scheduled messages into the line, and ran-out leases to jobs; both bounded. */
  async function housekeeping(now: Date): Promise<void> {
    const due = await withTx(deps.pool, (tx) => messagesClaimScheduled(tx, now, opts.batchSize * 4));
    if (due.length > 0) notified = true;
    const lost = await withTx(deps.pool, async (tx) => {
      const rows = await messagesLeaseExpired(tx, now, opts.batchSize);
      for (const m of rows) {
        // Attempt 2: the first may have reached the carrier; the job's rules for an unknown outcome apply.
        await enqueue(
          tx,
          'message.dispatch',
          { messageId: m.id, attempt: 2 },
          { runAt: now, jobKey: jobKeys.dispatch(m.id), priority: m.dispatch_rank ?? 0 },
        );
      }
      return rows;
    });
    if (lost.length > 0) log.warn({ messages: lost.length }, 'dispatch leases ran out: handed to jobs');
  }

  /**
   * One claim: the line's head, cleared and leased; the opted-out failed. Of a
   * number with a sending rate, at most PACE_AHEAD_MS worth is taken, its slots
   * with it; the rest keep their places.
   */
  async function claim(size: number): Promise<Claimed[]> {
    const leaseUntil = new Date(clock().getTime() + opts.leaseMs);
    return withTx(deps.pool, async (tx) => {
      // What can no longer go before its validity ends fails first, once, and is not taken.
      const at = clock();
      for (const m of await messagesExpireInLine(tx, EXPIRED, at, size)) {
        await announceFailed(tx, m, EXPIRED, 'its validity period ended before it could be sent', at);
      }
      // A carrier that asked us to slow down is left alone: its messages keep their places.
      const head = await messagesLineHead(tx, size, await carriersThrottled(tx, clock()), PACE_AHEAD_MS);
      if (head.length === 0) return [];
      const key = (carrier: string, number: string) => `${carrier} ${number}`;
      const paced = new Map(
        (
          await numbersPaced(
            tx,
            head.map((h) => ({ carrier: h.carrier, number: h.from_number })),
          )
        ).map((n) => [key(n.carrier, n.number), { n, taken: 0 }]),
      );
      const take = head.filter((h) => {
        const p = paced.get(key(h.carrier, h.from_number));
        if (!p) return true;
        return ++p.taken <= Math.max(1, Math.ceil((p.n.mps * PACE_AHEAD_MS) / 1000));
      });
      await pairLocksShared(
        tx,
        take.map((h) => ({ accountId: h.account_id, number: h.from_number, recipient: h.to_number })),
      );
      const cleared = await messagesClearForDispatch(
        tx,
        take.map((h) => h.id),
        leaseUntil,
      );
      const ok = new Set(cleared.map((c) => c.id));
      for (const h of take) {
        if (!ok.has(h.id)) {
          await fail(tx, h.id, OPTED_OUT, 'the recipient opted out of messages from this number', clock());
        }
      }
      cleared.sort((a, b) => (a.dispatched_at?.getTime() ?? 0) - (b.dispatched_at?.getTime() ?? 0));
      // Each paced number's slots, one statement per number, on the database's clock.
      const slots = new Map<string, NonNullable<Claimed['paced']>>();
      for (const { n } of paced.values()) {
        const mine = cleared.filter((m) => m.carrier === n.carrier && m.from_number === n.number);
        if (mine.length === 0) continue;
        // The database's time, taken as ours: the processes sharing a database keep their clocks in step
        // (NTP); correcting by a round trip's guess would shift each process's slots by its own latency.
        const { first } = await paceTake(tx, n, mine.length);
        const at = first.getTime();
        for (const [i, m] of mine.entries()) slots.set(m.id, { pace: n, at: at + (i * 1000) / n.mps });
      }
      return cleared.map((m) => ({ m, paced: slots.get(m.id) ?? null, leaseUntil: leaseUntil.getTime() }));
    });
  }

  const loop = (async () => {
    let failures = 0;
    let lastHousekeeping = 0;
    while (!stopped) {
      notified = false;
      try {
        if (Date.now() - lastHousekeeping >= pollMs / 2) {
          lastHousekeeping = Date.now();
          await housekeeping(clock());
        }
        // What waits to be recorded holds batches back too: a recorder behind is not fed more than it takes.
        const room = opts.batchSize * 2 - inHand - recorder.backlog();
        // A full hand still takes a few from the head when woken (their leases are renewed while they
        // wait): another account's message joins the line in the current round, so it need not wait for
        // a whole batch to be sent and recorded.
        const size = room >= opts.batchSize / 2 ? Math.min(room, opts.batchSize) : HEAD_CLAIM;
        const rows = await claim(size);
        for (const c of rows) send(c);
        failures = 0;
        // An empty claim may have walked past a long paced line: the next one not at once.
        if (rows.length === 0) await sleep(EMPTY_CLAIM_PAUSE_MS);
        if (rows.length === 0 || inHand >= opts.batchSize) await idle();
      } catch (err) {
        failures++;
        log.warn({ err: (err as Error).message }, 'dispatch claim failed');
        await sleep(Math.min(100 * 2 ** (failures - 1), 5_000));
      }
    }
  })();

  return {
    async stop() {
      stopped = true;
      wake?.();
      await loop;
      await Promise.allSettled([...inFlight]);
      clearInterval(renewal);
      await recorder.flush();
      await listener.stop();
    },
  };
}

interface Pending {
  args: Parameters<RecordSent>;
  /** When the carrier's answer came: the message's sent_at, however long it waits to be written. */
  at: Date;
  resolve: (o: DispatchOutcome) => void;
  reject: (err: Error) => void;
}

/**
 * Records sends the carrier took, many to a transaction: those that arrive while
 * one commits go in the next. A transaction that fails whole is tried again one
 * message at a time, so one bad row cannot hold up the rest; a database that is
 * gone fails them all, and their leases keep them.
 */
class SentRecorder {
  private queue: Pending[] = [];
  private inWrite = 0;
  private writing: Promise<void> | null = null;

  constructor(
    private readonly deps: DispatchDeps,
    private readonly handOff: HandOffTaker | undefined,
    /** Told after each batch is written: the dispatcher may claim again. */
    private readonly written: () => void,
  ) {}

  readonly record: RecordSent = (...args) =>
    new Promise<DispatchOutcome>((resolve, reject) => {
      this.queue.push({ args, at: (this.deps.now ?? (() => new Date()))(), resolve, reject });
      if (!this.writing) this.writing = this.drain();
    });

  /** Sends the carriers took that are not yet committed. */
  backlog(): number {
    return this.queue.length + this.inWrite;
  }

  async flush(): Promise<void> {
    while (this.writing) await this.writing;
  }

  private async drain(): Promise<void> {
    // A turn of the event loop, so answers arriving together are recorded together.
    await new Promise((r) => setImmediate(r));
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, RECORD_BATCH);
      this.inWrite = batch.length;
      try {
        const outcomes = await this.write(batch);
        for (const [i, p] of batch.entries()) p.resolve(outcomes[i]!);
        this.inWrite = 0;
        this.written();
      } catch {
        for (const p of batch) {
          await this.write([p]).then(
            ([o]) => p.resolve(o!),
            (err: Error) => p.reject(err),
          );
        }
      }
    }
    this.inWrite = 0;
    this.writing = null;
  }

  private async write(batch: Pending[]): Promise<readonly DispatchOutcome[]> {
    const handOff = this.handOff ? new HandOff(this.handOff) : null;
    // Side by side: on a pipelining connection each statement of every message goes in one round trip.
    const run = (tx: Tx) => () => together(tx, ...batch.map((p) => () => recordSent(tx, ...p.args, p.at)));
    const outcomes = await withTx(this.deps.pool, (tx) => (handOff ? handingOff(tx, handOff, run(tx)) : run(tx)()));
    handOff?.handOver();
    return outcomes;
  }
}
