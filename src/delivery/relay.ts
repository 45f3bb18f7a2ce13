// The worker's delivery relay: a pending delivery to a healthy endpoint is its
// own job until its first attempt. The relay claims due rows in batches (oldest
// first, FOR UPDATE SKIP LOCKED, no more of an endpoint than it has room for)
// and leases each past its attempt's deadline in the claim's one statement, so
// no connection is held during the HTTP call and loops and processes take
// disjoint rows. Each claimed delivery is then attempted and recorded exactly as
// a job's attempt is (deliver.ts), in its own promise: one slow endpoint never
// holds up the batch it came in. What moves a delivery on clears its lease in
// the transaction that does so: its outcome, its retry's job, or its lane's job
// when its endpoint is failing. The guarantees are the row's:
//
// - No queued job, fetch or completion per delivery: the fan-out's one NOTIFY per
//   transaction wakes the relay, a poll covers a lost notification. A finished
//   attempt wakes it only when the last claim may have left due rows behind (it
//   was full, or an endpoint or account had no room left): otherwise that claim
//   took everything due, and a claim per finished attempt would find nothing.
// - Fair shares hold as for jobs (capacity.ts): the claim leaves alone the
//   endpoints (and accounts) with their share in flight here, and a claimed row
//   that finds no room after all is handed back at once, never waited for.
// - A lease lasts the crash-recovery bound (HANDSET_WORKER_STALE_AFTER) and is
//   renewed while its attempt runs, so a worker that dies holding leases leaves
//   those rows to be claimed again within that bound: the receiver may get the
//   event twice, with the same webhook-id (at-least-once). An attempt that fails to run (the database went
//   away) hands its row back to be tried again shortly.
// - The deliveries this worker's carrier-event batches fan out are handed to it
//   (handoff.ts), leased in the batch's transaction with what each attempt needs:
//   attempted once it committed, with no claim and no load. What it has no room
//   for it hands back at once, in one statement, to be claimed as slots free.
// - Claims start from a floor (db/floor.ts): the oldest relay time of any row the
//   relay may take or holds, looked up from the head of the relay index once a
//   FLOOR_REFRESH_MS, so a claim does not walk the entries the deliveries finished
//   since the last VACUUM left behind.

import { setTimeout as sleep } from 'node:timers/promises';
import { Listener } from '../db/listen.js';
import type { Logger } from '../telemetry/log.js';
import { ClaimFloor } from '../db/floor.js';
import {
  type ClaimRoom,
  DELIVERY_CHANNEL,
  type DeliveryWork,
  deliveryClaim,
  deliveryRelayAt,
  deliveryRelayOldest,
} from './deliveries.sql.js';
import type { HandOffTaker } from './handoff.js';
import { type DeliveryDeps, deliver } from './deliver.js';

/** Claimed rows at most per claim. */
export const DELIVERY_RELAY_BATCH = 50;
/** The backstop for a lost notification and for leases that ran out; graphile-worker polls as often. */
const POLL_MS = 1_000;
/** How soon an attempt that failed to run (not the endpoint: the database) is tried again. */
const RETRY_MS = 1_000;

export interface DeliveryRelayOptions {
  deliver: DeliveryDeps;
  log: Logger;
  /** Attempts in flight at once in this process, as the delivery job runner's concurrency. */
  concurrency: number;
  /**
   * How long a claim holds a row unless renewed (HANDSET_WORKER_STALE_AFTER): the
   * relay renews its attempts' leases every third of it, so only a dead worker's run out.
   */
  leaseMs: number;
  batchSize?: number;
  pollIntervalMs?: number;
  /** At least this often the floor is looked up from the head; defaults to FLOOR_REFRESH_MS. */
  floorRefreshMs?: number;
}

export interface DeliveryRelay extends HandOffTaker {
  /** Stops claiming and waits for the attempts in flight to be recorded. */
  stop(): Promise<void>;
}

export function startDeliveryRelay(opts: DeliveryRelayOptions): DeliveryRelay {
  const { log } = opts;
  const deps = opts.deliver;
  const { pool, capacity } = deps;
  const clock = deps.now ?? (() => new Date());
  const batchSize = opts.batchSize ?? DELIVERY_RELAY_BATCH;
  const pollMs = opts.pollIntervalMs ?? POLL_MS;
  const { leaseMs } = opts;
  let stopped = false;
  const stopping = new AbortController();
  /** Set by a notification or a finished attempt, cleared by the claim that follows: no wake-up is lost. */
  let woken = false;
  /** Whether the last claim may have left due rows for want of room: then a freed slot is worth a claim. */
  let leftBehind = false;
  let wake: (() => void) | null = null;
  const wakeUp = () => {
    woken = true;
    wake?.();
  };
  // A slot freed elsewhere (a lane's attempt, in this process's job runner) is room for rows left behind too.
  const unsubscribe = capacity.onRelease(() => {
    if (leftBehind && !stopped) wakeUp();
  });
  /** Attempts in flight: the delivery each holds the lease of → its run. */
  const running = new Map<string, Promise<void>>();
  /** Hand-backs committed so far: a claim that ran meanwhile may not have seen their rows. */
  let handBacks = 0;

  /**
   * Rows it holds and has no room for, due again at once for the claim made as
   * slots free. Once they are due, a slot freed meanwhile is worth a claim now:
   * the attempts that freed it had nothing left behind to wake it for yet.
   */
  async function handBack(works: readonly DeliveryWork[]) {
    await deliveryRelayAt(
      pool,
      works.map((w) => w.delivery.id),
      clock(),
    );
    handBacks++;
    leftBehind = true;
    const slots = opts.concurrency - running.size;
    if (!stopped && capacity.admit(works.map(slotOf), slots)[0].length > 0) wakeUp();
  }

  // Renew the leases of the attempts in flight; a renewal that fails is tried at the next tick, well within the lease.
  // Only a lease still held is extended: one an attempt handed back meanwhile (no room, or it failed to run)
  // must stay due, not be leased to nobody for another whole lease.
  const renewal = setInterval(() => {
    if (running.size === 0) return;
    const now = clock().getTime();
    const heldPast = new Date(now + Math.min(2 * RETRY_MS, leaseMs / 3));
    deliveryRelayAt(pool, [...running.keys()], new Date(now + leaseMs), heldPast).catch((err: Error) =>
      log.warn({ err: err.message }, 'could not renew the delivery relay’s leases'),
    );
  }, leaseMs / 3);
  renewal.unref();

  const listener = new Listener({
    pool,
    channel: DELIVERY_CHANNEL,
    applicationName: 'handset-delivery-relay-listen',
    onNotification: wakeUp,
    // What was emitted while nobody listened is found by the claim after this wake-up.
    onUp: wakeUp,
    onDown: (why, _wasUp, retryInMs) =>
      log.debug({ err: why, retryInMs }, 'delivery listener lost: the relay polls until it is back'),
  });
  void listener.start();

  /** Where claims start (a relay time, in ms). */
  const floor = new ClaimFloor((at) => at.getTime(), opts.floorRefreshMs);

  /** Resolves on a notification, a finished attempt, the poll, the floor's next look-up, or stop. */
  function idle(): Promise<void> {
    if (woken || stopped) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, Math.min(pollMs, floor.untilLook()));
      function done() {
        clearTimeout(timer);
        wake = null;
        resolve();
      }
      wake = done;
    });
  }

  function attempt(work: DeliveryWork) {
    const id = work.delivery.id;
    let handedBack = false;
    const run = deliver(
      deps,
      { deliveryId: id, trigger: 'scheduled' },
      {
        inSerialQueue: false,
        whenFull: () => {
          handedBack = true;
          return handBack([work]);
        },
        work,
      },
    )
      .catch(async (err: Error) => {
        log.warn({ deliveryId: id, err: err.message }, 'delivery attempt failed to run; it is tried again shortly');
        // If this fails too, the lease running out hands it back.
        await deliveryRelayAt(pool, [id], new Date(clock().getTime() + RETRY_MS)).catch(() => undefined);
      })
      .finally(() => {
        running.delete(id);
        // A slot is free (a row handed back freed none): worth a claim if rows were left for want of one.
        if (!handedBack && leftBehind) wakeUp();
      });
    running.set(id, run);
  }

  async function loop() {
    let failures = 0; // claims failed in a row, for the backoff
    while (!stopped) {
      woken = false;
      const limit = Math.min(batchSize, opts.concurrency - running.size, capacity.free());
      if (limit <= 0) {
        leftBehind = true;
        await idle();
        continue;
      }
      let claimed: DeliveryWork[];
      try {
        const now = clock();
        const from = floor.get() ?? floor.looked((await deliveryRelayOldest(pool))?.getTime() ?? null, now);
        const room = { limit, ...capacity.room() };
        const handBacksBefore = handBacks;
        claimed = await deliveryClaim(pool, now, new Date(now.getTime() + leaseMs), room, new Date(from));
        leftBehind = mayHaveLeftRows(room, claimed) || handBacks !== handBacksBefore;
        failures = 0;
      } catch (err) {
        failures++;
        log.warn({ err: (err as Error).message }, 'delivery claim failed');
        await sleep(Math.min(100 * 2 ** (failures - 1), 5_000), undefined, { signal: stopping.signal }).catch(
          () => undefined, // stopped meanwhile
        );
        continue;
      }
      for (const work of claimed) attempt(work);
      if (claimed.length < limit) await idle();
    }
  }

  const looping = loop();

  /**
   * Deliveries handed over by this worker's committed batches, each with what its
   * attempt needs: those its slots and their endpoints' and accounts' room admit
   * are attempted at once; the rest (all of them while stopping) are due again
   * at once, in one statement, for the claim made as slots free.
   */
  async function take(handed: readonly DeliveryWork[]) {
    const slots = stopped ? 0 : Math.max(0, opts.concurrency - running.size);
    const [admitted, rest] = capacity.admit(handed.map(slotOf), slots);
    for (const { work } of admitted) attempt(work);
    // If this fails, the lease running out hands them back.
    if (rest.length > 0) {
      await handBack(rest.map((r) => r.work)).catch((err: Error) =>
        log.warn({ err: err.message, deliveries: rest.length }, 'could not hand back the deliveries handed over'),
      );
    }
  }
  /** Hand-overs being taken: stop() waits for them before it waits for the attempts. */
  const taking = new Set<Promise<void>>();

  return {
    leaseUntil: () => new Date(clock().getTime() + leaseMs),
    take(deliveries) {
      const taken = take(deliveries).finally(() => taking.delete(taken));
      taking.add(taken);
    },
    async stop() {
      stopped = true;
      unsubscribe();
      stopping.abort();
      wake?.();
      await looping;
      await Promise.allSettled([...taking]);
      await Promise.allSettled([...running.values()]);
      clearInterval(renewal);
      await listener.stop();
    },
  };
}

/** What a delivery's slot counts against (Capacity.admit). */
const slotOf = (work: DeliveryWork) => ({ endpointId: work.endpoint.id, accountId: work.endpoint.account_id, work });

/**
 * Whether a claim given `room` that took `claimed` may have passed over due rows:
 * it took its limit, or an endpoint or account had no room, or took all it had.
 * Otherwise every due row in its window was taken (or is another relay's).
 */
export function mayHaveLeftRows(room: ClaimRoom, claimed: readonly DeliveryWork[]): boolean {
  if (claimed.length >= room.limit) return true;
  if (room.endpointRooms.some((n) => n <= 0) || room.accountRooms.some((n) => n <= 0)) return true;
  const roomOf = (ids: string[], rooms: number[], fallback: number) => {
    const given = new Map(ids.map((id, i) => [id, rooms[i]!]));
    return (id: string) => given.get(id) ?? fallback;
  };
  const endpointRoom = roomOf(room.endpoints, room.endpointRooms, room.perEndpoint);
  const accountRoom = roomOf(room.accounts, room.accountRooms, room.perAccount);
  const byEndpoint = new Map<string, number>();
  const byAccount = new Map<string, number>();
  for (const { endpoint } of claimed) {
    const e = (byEndpoint.get(endpoint.id) ?? 0) + 1;
    const a = (byAccount.get(endpoint.account_id) ?? 0) + 1;
    byEndpoint.set(endpoint.id, e);
    byAccount.set(endpoint.account_id, a);
    if (e >= endpointRoom(endpoint.id) || a >= accountRoom(endpoint.account_id)) return true;
  }
  return false;
}
