// Group commit for ingest: webhooks that arrive while a write is in flight wait
// and go into the next write together, as one statement and one transaction
// (carrierEventStoreMany). Nobody waits for a timer: an idle writer sends a
// lone webhook at once, so a quiet ingest answers as fast as before, and a busy
// one pays one commit (one WAL flush, one NOTIFY) per batch instead of per
// webhook. Each caller is answered only after its batch committed, so "never a
// 2xx before the row and its job are durable" holds per webhook.
//
// Why: a transaction that NOTIFYs (graphile_worker.add_job does) takes a
// cluster-wide lock at commit and holds it through the WAL flush, so such
// commits run one at a time however many connections send them. Measured on
// the 2-core bench machine: one event per transaction stays at a few hundred
// per second at any concurrency; batches scale with their size.
//
// A batch the database refuses as bad input (a body jsonb cannot hold) is
// retried one webhook at a time, so only the offending webhook is refused; any
// other failure (connection, lock timeout…) fails the whole batch, and every
// webhook in it gets its 503 and is retried by the carrier.
//
// The queue is bounded: while the database is slow (a long lock, a statement
// running to its timeout) webhooks pile up behind the write in flight, and each
// would wait out several writes before its answer, past the carrier's deadline.
// A webhook that finds the queue full is refused at once (a 503, so the carrier
// retries later) instead of waiting for an answer it would never see.

import type pg from 'pg';
import { carrierEventStoreMany, type NewCarrierEvent, type StoreResult } from '../carrier/events.sql.js';
import { isBadInput } from '../db/errors.js';

export interface GroupCommitOptions {
  /**
   * Writes in flight at once; each holds one connection. Default 1: notifying
   * commits serialize anyway, so a second write only splits the queue into
   * smaller batches, and every batch costs PostgreSQL a fixed ~1 ms of CPU
   * (add_jobs, the NOTIFY, the commit) taken from the cores ingest needs.
   * Measured on the 2-core bench machine, one ingest process, 3 runs each:
   * 1 in flight 3,070–3,480/s at c=16 and 4,370–4,520/s at c=64; 2 in flight
   * 2,850–2,940/s and 3,590–3,860/s, with higher latency.
   */
  maxInFlight?: number;
  /** At most this many webhooks per write. */
  maxBatch?: number;
  /** And at most this much body text, in characters (a write always takes at least one webhook). */
  maxBatchBytes?: number;
  /** Webhooks waiting for a write beyond the ones in flight; one more is refused at once. */
  maxQueue?: number;
}

/** The queue was full: nothing was written, try again later. */
export class IngestQueueFullError extends Error {
  override name = 'IngestQueueFullError';
}

interface Waiting {
  event: NewCarrierEvent;
  resolve: (r: StoreResult) => void;
  reject: (err: unknown) => void;
}

export class CarrierEventWriter {
  private readonly queue: Waiting[] = [];
  private inFlight = 0;
  private readonly maxInFlight: number;
  private readonly maxBatch: number;
  private readonly maxBatchBytes: number;
  private readonly maxQueue: number;

  constructor(
    private readonly pool: pg.Pool,
    opts: GroupCommitOptions = {},
  ) {
    this.maxInFlight = opts.maxInFlight ?? 1;
    this.maxBatch = opts.maxBatch ?? 200;
    this.maxBatchBytes = opts.maxBatchBytes ?? 8 * 1024 * 1024;
    this.maxQueue = opts.maxQueue ?? 400;
  }

  /** Webhooks waiting for a write, beyond the ones in flight. */
  get waiting(): number {
    return this.queue.length;
  }

  /**
   * Resolves once the event (or the fact that it was already stored) is committed;
   * rejects at once with IngestQueueFullError when the queue is full.
   */
  store(event: NewCarrierEvent): Promise<StoreResult> {
    if (this.queue.length >= this.maxQueue) {
      return Promise.reject(new IngestQueueFullError(`${this.queue.length} webhooks already wait for a write`));
    }
    return new Promise((resolve, reject) => {
      this.queue.push({ event, resolve, reject });
      this.flush();
    });
  }

  private flush(): void {
    while (this.inFlight < this.maxInFlight && this.queue.length > 0) {
      let bytes = 0;
      let n = 0;
      while (n < this.queue.length && n < this.maxBatch) {
        bytes += this.queue[n]!.event.rawJson.length;
        if (n > 0 && bytes > this.maxBatchBytes) break;
        n++;
      }
      const batch = this.queue.splice(0, n);
      this.inFlight++;
      void this.write(batch).finally(() => {
        this.inFlight--;
        this.flush();
      });
    }
  }

  private async write(batch: Waiting[]): Promise<void> {
    try {
      const results = await carrierEventStoreMany(
        this.pool,
        batch.map((w) => w.event),
      );
      for (const [i, w] of batch.entries()) w.resolve(results[i]!);
    } catch (err) {
      if (batch.length > 1 && isBadInput(err)) {
        // Find the webhook the database refused; the others are stored as usual.
        for (const w of batch) {
          await carrierEventStoreMany(this.pool, [w.event]).then(
            ([r]) => w.resolve(r!),
            (e: unknown) => w.reject(e),
          );
        }
        return;
      }
      for (const w of batch) w.reject(err);
    }
  }
}
