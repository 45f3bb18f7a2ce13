// The worker's carrier-event relay: a stored, unprocessed carrier event is its own
// job. Each relay loop claims a batch of due events (oldest first, FOR UPDATE SKIP
// LOCKED, so loops and processes take disjoint batches), runs each in a savepoint
// of one transaction, marks those that ran to an end processed in one statement,
// and commits once: one commit and one WAL flush per batch instead of a queued
// job, its fetch and its completion per event. The guarantees are the row's:
//
// - A crashed worker's claimed events are released with its transaction and
//   claimed again at once; a committed event is processed, so nothing needs
//   acknowledging and nothing is recovered by a sweeper.
// - An event that waits or fails rolls back only its own savepoint and is
//   postponed (error, attempts, run_after) in the batch's transaction; the batch
//   goes on. A wait for a lock is bounded by the worker connections' lock timeout
//   (HANDSET_WORKER_LOCK_TIMEOUT), so a row held elsewhere postpones one event
//   instead of stalling the batch for longer.
// - A batch that fails whole (the database went away, or an event broke the
//   transaction itself) is retried one event per transaction, and an event that
//   fails alone is postponed in a transaction of its own: no event holds up others.
//
// Loops wake on ingest's one NOTIFY per stored batch (CARRIER_EVENT_CHANNEL), on
// the earliest postponed event falling due, and on a poll that covers a lost
// notification or a listener that is down.
//
// The customer deliveries a batch fans out are handed to this worker's delivery
// relay (delivery/handoff.ts) when it is given one: leased in the batch's
// transaction, attempted once it committed.
//
// Claims start from a floor (db/floor.ts): the oldest due event the last claim
// from the head found, or less. A claim from the head is made at least once a
// FLOOR_REFRESH_MS, when a postponed event falls due and after a failure, so an
// event the floor passed over waits at most that long, and a backlog is claimed
// oldest first, from its own head.

import { setTimeout as sleep } from 'node:timers/promises';
import { ClaimFloor } from '../db/floor.js';
import { Listener } from '../db/listen.js';
import { withTx } from '../db/tx.js';
import { HandOff, type HandOffTaker, handingOff } from '../delivery/handoff.js';
import type { Logger } from '../telemetry/log.js';
import type { Metrics } from '../telemetry/metrics.js';
import {
  CARRIER_EVENT_CHANNEL,
  carrierEventClaim,
  carrierEventIdAt,
  carrierEventMarkProcessed,
  type Settled,
} from './events.sql.js';
import { postponeFailed, type ProcessDeps, type Run, runClaimed } from './process.js';

/** Loops per worker process; each holds one connection while it runs a batch. */
export const RELAY_LOOPS = 2;
/** Events per claim: large enough to amortize the commit, small enough to keep locks short. */
export const RELAY_BATCH = 50;
/** The backstop for a lost notification and for postponed events; graphile-worker polls as often. */
const POLL_MS = 1_000;

/** What a batch had claimed when it failed whole. */
type Claimed = { id: string; attempts: number };

export interface RelayOptions {
  process: ProcessDeps;
  log: Logger;
  metrics: Metrics;
  loops?: number;
  batchSize?: number;
  pollIntervalMs?: number;
  /** At least this often a claim is made from the head of the pending index; defaults to FLOOR_REFRESH_MS. */
  fullClaimIntervalMs?: number;
  /** This worker's delivery relay: a batch's deliveries are leased to it and handed over once committed. */
  handOff?: HandOffTaker;
}

export interface Relay {
  /** Stops claiming and waits for the batches in flight to commit or roll back. */
  stop(): Promise<void>;
}

export function startRelay(opts: RelayOptions): Relay {
  const { log, metrics } = opts;
  const deps = opts.process;
  const pool = deps.pool;
  const clock = deps.now ?? (() => new Date());
  const batchSize = opts.batchSize ?? RELAY_BATCH;
  const pollMs = opts.pollIntervalMs ?? POLL_MS;
  let stopped = false;
  const stopping = new AbortController();
  /** Set by a notification, cleared by the loop that takes it; so a wake-up during a batch is not lost. */
  let notified = false;
  /** The earliest run_after this process postponed an event to; 0: none (other processes' are found by the poll). */
  let nextDueAt = 0;
  /** Where this process's claims start; shared by its loops. */
  const floor = new ClaimFloor(carrierEventIdAt, opts.fullClaimIntervalMs);
  const waiters = new Set<() => void>();
  const wakeAll = () => {
    for (const w of waiters) w();
  };

  // One listening connection per process; while it is down the poll finds what was stored.
  const listener = new Listener({
    pool,
    channel: CARRIER_EVENT_CHANNEL,
    applicationName: 'handset-relay-listen',
    onNotification: () => {
      notified = true;
      wakeAll();
    },
    // What was stored while nobody listened is found by the claim after this wake-up.
    onUp: () => {
      notified = true;
      wakeAll();
    },
    onDown: (why, _wasUp, retryInMs) =>
      log.debug({ err: why, retryInMs }, 'carrier event listener lost: the relay polls until it is back'),
  });
  void listener.start();

  function noteDue(at: Date) {
    const t = at.getTime();
    if (nextDueAt === 0 || t < nextDueAt) nextDueAt = t;
  }

  /**
   * Resolves on a notification, on the next postponed event's time, on the poll, or on stop;
   * after a claim from the floor, also when the next claim from the head is due.
   */
  function idle(fromFloor: boolean): Promise<void> {
    if (notified || stopped) return Promise.resolve();
    const now = Date.now();
    let due = nextDueAt > 0 ? Math.max(0, nextDueAt - now) : pollMs;
    if (fromFloor) due = Math.min(due, floor.untilLook());
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, Math.min(pollMs, due));
      waiters.add(done);
    });
  }

  /** One claim, run and commit; resolves with each claimed event's run. */
  async function batch(size: number, from: string | null, claimed: Claimed[]): Promise<Run[]> {
    const end = metrics.carrierEventBatchDuration.startTimer();
    const handOff = opts.handOff ? new HandOff(opts.handOff) : null;
    try {
      const runs = await withTx(pool, async (tx) => {
        const now = clock();
        const rows = await carrierEventClaim(tx, now, size, from ?? '');
        if (from === null) floor.looked(rows[0]?.id ?? null, now);
        claimed.push(...rows.map((r) => ({ id: r.id, attempts: r.attempts })));
        const run = async () => {
          const runs: Run[] = [];
          const settled: Settled[] = [];
          for (const row of rows) runs.push(await runClaimed(tx, deps, row, now, settled));
          await carrierEventMarkProcessed(tx, settled, now);
          return runs;
        };
        return handOff ? handingOff(tx, handOff, run) : run();
      });
      handOff?.handOver();
      return runs;
    } finally {
      end();
    }
  }

  async function loop(n: number) {
    let failures = 0; // in a row, for the backoff
    let solo = 0; // claims still to make one event at a time, after a batch failed whole
    while (!stopped) {
      if (nextDueAt > 0 && nextDueAt <= Date.now()) {
        nextDueAt = 0;
        floor.lower(); // a postponed event fell due, below the floor perhaps
      }
      notified = false;
      const size = solo > 0 ? 1 : batchSize;
      const from = solo > 0 ? null : floor.get();
      const claimed: Claimed[] = [];
      let got: number;
      try {
        const runs = await batch(size, from, claimed);
        // Counted once committed (a batch rolled back runs again); a postponed event's time is noted.
        for (const { outcome, runAfter } of runs) {
          metrics.carrierEvents.inc({ outcome });
          if (runAfter) noteDue(runAfter);
        }
        got = runs.length;
        failures = 0;
        if (solo > 0) solo--;
      } catch (err) {
        failures++;
        floor.lower(); // what it had claimed is pending again
        const reason = `${(err as Error).name}: ${(err as Error).message}`;
        log.warn({ loop: n, claimed: claimed.length, err: reason }, 'carrier event batch rolled back');
        const [alone] = claimed;
        if (size > 1) {
          solo = Math.max(1, claimed.length); // each of them alone, to find the one that breaks it
        } else if (alone) {
          // Alone and still failing: the event itself breaks its transaction. Postponed in one of
          // its own, the events behind it go on; if the database is what failed, this fails too.
          const runAfter = await postponeFailed(pool, deps, alone.id, alone.attempts + 1, reason, clock()).catch(
            () => null,
          );
          if (runAfter) {
            noteDue(runAfter);
            solo--;
            failures = 0;
            continue;
          }
        }
        await sleep(Math.min(100 * 2 ** (failures - 1), 5_000), undefined, { signal: stopping.signal }).catch(
          () => undefined, // stopped meanwhile
        );
        continue;
      }
      if (got < size) {
        solo = 0; // nothing more is due (above the floor, after a claim from it)
        await idle(from !== null);
      }
    }
  }

  const loops = Array.from({ length: opts.loops ?? RELAY_LOOPS }, (_, i) => loop(i));

  return {
    async stop() {
      stopped = true;
      stopping.abort();
      wakeAll();
      await Promise.all(loops);
      await listener.stop();
    },
  };
}
