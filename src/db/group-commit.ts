// Group commit: callers that arrive while a write is in flight wait and go into
// the next write together, as one statement (one transaction, one WAL flush).
// Nobody waits for a timer: an idle writer sends a lone item at once, so a quiet
// process answers as fast as with a write per item, and a busy one pays one
// commit per batch instead of per item. Each caller is answered only after its
// batch committed, so "durable before acknowledged" holds per item.
//
// A batch the database refuses as bad input is retried one item at a time, so
// only the offending item is refused; any other failure (connection, timeout…)
// fails the whole batch, and every caller in it gets the error.
//
// The queue may be bounded: while the database is slow, callers pile up behind
// the write in flight, and one that finds the queue full is refused at once
// (QueueFullError) instead of waiting for an answer that would come too late.

import { isBadInput } from './errors.js';

export interface GroupCommitOptions {
  /** Writes in flight at once; each holds one connection. */
  maxInFlight?: number;
  /** At most this many items per write. */
  maxBatch?: number;
  /** And at most this much `weight` per write (a write always takes at least one item). */
  maxBatchWeight?: number;
  /** Items waiting for a write beyond the ones in flight; one more is refused at once. */
  maxQueue?: number;
}

/** The queue was full: nothing was written, try again later. */
export class QueueFullError extends Error {
  override name = 'QueueFullError';
}

interface Waiting<In, Out> {
  item: In;
  resolve: (r: Out) => void;
  reject: (err: unknown) => void;
}

export class GroupCommit<In, Out> {
  private readonly queue: Waiting<In, Out>[] = [];
  private inFlight = 0;
  private readonly maxInFlight: number;
  private readonly maxBatch: number;
  private readonly maxBatchWeight: number;
  private readonly maxQueue: number;
  private readonly weight: (item: In) => number;

  /**
   * `write` stores a batch as one statement and answers each item, in order.
   * `weight` is what maxBatchWeight counts (a body's length, say); 0 by default.
   */
  constructor(
    private readonly write: (items: In[]) => Promise<Out[]>,
    opts: GroupCommitOptions & { weight?: (item: In) => number } = {},
  ) {
    this.maxInFlight = opts.maxInFlight ?? 1;
    this.maxBatch = opts.maxBatch ?? 200;
    this.maxBatchWeight = opts.maxBatchWeight ?? Number.POSITIVE_INFINITY;
    this.maxQueue = opts.maxQueue ?? Number.POSITIVE_INFINITY;
    this.weight = opts.weight ?? (() => 0);
  }

  /** Items waiting for a write, beyond the ones in flight. */
  get waiting(): number {
    return this.queue.length;
  }

  /** Resolves once the item's batch committed; rejects at once when the queue is full. */
  submit(item: In): Promise<Out> {
    if (this.queue.length >= this.maxQueue) {
      return Promise.reject(new QueueFullError(`${this.queue.length} already wait for a write`));
    }
    return new Promise((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.flush();
    });
  }

  private flush(): void {
    while (this.inFlight < this.maxInFlight && this.queue.length > 0) {
      let weight = 0;
      let n = 0;
      while (n < this.queue.length && n < this.maxBatch) {
        weight += this.weight(this.queue[n]!.item);
        if (n > 0 && weight > this.maxBatchWeight) break;
        n++;
      }
      const batch = this.queue.splice(0, n);
      this.inFlight++;
      void this.run(batch).finally(() => {
        this.inFlight--;
        this.flush();
      });
    }
  }

  private async run(batch: Waiting<In, Out>[]): Promise<void> {
    try {
      const results = await this.write(batch.map((w) => w.item));
      for (const [i, w] of batch.entries()) w.resolve(results[i]!);
    } catch (err) {
      if (batch.length > 1 && isBadInput(err)) {
        // Find the item the database refused; the others are written as usual.
        for (const w of batch) {
          await this.write([w.item]).then(
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
