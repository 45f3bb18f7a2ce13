// Telnyx's Idempotency-Key, as the simulated carrier honours it on its sends
// (POST /v2/messages, POST /v2/calls), following Telnyx's documented contract:
// - a key is 1 to 255 letters, digits, '-', '_' or ':'; anything else (empty,
//   repeated, too long) is refused 400 before anything is done;
// - a record is the key, the account (one per simulator), the method and the path;
// - only a successful answer is stored, for 24 hours of wall-clock time: a request
//   that failed stores nothing, so its retry with the same key is carried out;
// - the same key with the same request (query and body byte for byte; headers do
//   not count) is answered with the stored answer and nothing is done again;
// - the same key with another request is 422 while the record exists;
// - the same key while the first request is still being carried out is 409.
// This module only keeps the records; rest.ts decides what each answer is.

export const IDEMPOTENCY_KEY = /^[A-Za-z0-9_:-]{1,255}$/;
/** How long a stored answer is replayed (wall-clock ms). */
export const IDEMPOTENCY_WINDOW_MS = 24 * 60 * 60 * 1000;

interface Entry {
  fingerprint: string;
  /** Wall-clock ms the answer was stored (or the request started, while in flight). */
  at: number;
  /** The stored answer; null while the first request is in flight. */
  answer: unknown;
  inFlight: boolean;
}

export type Claim =
  | { kind: 'replay'; answer: unknown }
  | { kind: 'in_flight' }
  | { kind: 'mismatch' }
  | { kind: 'claimed'; store(answer: unknown): void; release(): void };

export class IdempotencyRecords {
  private entries = new Map<string, Entry>();

  constructor(private readonly now: () => number) {}

  /**
   * Looks the key up for `scope` (method and path) and the request's
   * fingerprint; when nothing is stored, claims the key for this request, which
   * must then store its successful answer or release the key.
   */
  claim(scope: string, key: string, fingerprint: string): Claim {
    const id = `${scope} ${key}`;
    const now = this.now();
    const found = this.entries.get(id);
    if (found && (found.inFlight || now - found.at <= IDEMPOTENCY_WINDOW_MS)) {
      if (found.inFlight) return { kind: 'in_flight' };
      if (found.fingerprint !== fingerprint) return { kind: 'mismatch' };
      return { kind: 'replay', answer: found.answer };
    }
    this.sweep(now);
    const entry: Entry = { fingerprint, at: now, answer: null, inFlight: true };
    this.entries.set(id, entry);
    return {
      kind: 'claimed',
      store: (answer) => {
        entry.answer = answer;
        entry.inFlight = false;
        entry.at = this.now();
      },
      release: () => {
        if (this.entries.get(id) === entry) this.entries.delete(id);
      },
    };
  }

  clear(): void {
    this.entries.clear();
  }

  /** Keeps memory bounded on long runs: expired records go once there are many. */
  private sweep(now: number): void {
    if (this.entries.size < 10_000) return;
    for (const [id, e] of this.entries) if (!e.inFlight && now - e.at > IDEMPOTENCY_WINDOW_MS) this.entries.delete(id);
  }
}
