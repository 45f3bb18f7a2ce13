// One LISTEN connection that outlives database failures: a connection of its own
// (not the pool's: a LISTEN must stay on one session), replaced with a doubling
// delay whenever it errors, ends, or leaves a trivial query unanswered past a
// deadline (a silently dead TCP peer). Its owner hears when it is up (and so
// notices can arrive), when it is down (and so notices may be missed), and each
// notice on its channel.
//
//   down ──connect + LISTEN ok──▶ up
//    ▲                            │
//    └── error / end / a heartbeat unanswered ──┘

import pg from 'pg';

const HEARTBEAT_MS = 10_000;
const HEARTBEAT_DEADLINE_MS = 5_000;
const RECONNECT_MIN_MS = 100;
const RECONNECT_MAX_MS = 5_000;

export interface ListenerOptions {
  pool: pg.Pool;
  /** An identifier: it is spelled into the LISTEN statement. */
  channel: string;
  applicationName: string;
  /** Where the connection goes; the pool's database by default (a test puts a cuttable proxy between). */
  connectionString?: string;
  onNotification(payload: string): void;
  /** Listening; `afterLoss` when an earlier connection was lost (or never came up). */
  onUp(afterLoss: boolean): void;
  /** No longer listening (not called on stop); `wasUp`: whether it had been. */
  onDown(why: string, wasUp: boolean, retryInMs: number): void;
}

export class Listener {
  private client: pg.Client | null = null;
  private listening = false;
  private stopped = false;
  private reconnectMs = RECONNECT_MIN_MS;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private heartbeatTimer: NodeJS.Timeout | null = null;

  constructor(private readonly o: ListenerOptions) {}

  get up(): boolean {
    return this.listening;
  }

  /** Resolves after the first attempt, whether or not it connected (it keeps trying). */
  start(): Promise<void> {
    return this.connect();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    await this.close();
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    const client = new pg.Client({
      ...this.o.pool.options,
      ...(this.o.connectionString ? { connectionString: this.o.connectionString } : {}),
      application_name: this.o.applicationName,
    });
    this.client = client;
    // A broken connection must not crash the process: it is noticed and replaced.
    client.on('error', (err) => this.lost(client, err.message));
    client.on('end', () => this.lost(client, 'connection ended'));
    client.on('notification', (msg) => {
      if (msg.channel === this.o.channel) this.o.onNotification(msg.payload ?? '');
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${this.o.channel}`);
    } catch (err) {
      this.lost(client, (err as Error).message);
      return;
    }
    if (this.client !== client) return; // lost (or stopped) while connecting
    const afterLoss = this.reconnectMs > RECONNECT_MIN_MS;
    this.listening = true;
    this.reconnectMs = RECONNECT_MIN_MS;
    this.heartbeatTimer = setInterval(() => this.heartbeat(client), HEARTBEAT_MS);
    this.heartbeatTimer.unref();
    this.o.onUp(afterLoss);
  }

  private heartbeat(client: pg.Client): void {
    const deadline = setTimeout(() => this.lost(client, 'heartbeat unanswered'), HEARTBEAT_DEADLINE_MS);
    deadline.unref();
    client.query('SELECT 1').then(
      () => clearTimeout(deadline),
      (err: Error) => {
        clearTimeout(deadline);
        this.lost(client, err.message);
      },
    );
  }

  private lost(client: pg.Client, why: string): void {
    if (this.client !== client) return; // an old connection's last words
    const wasUp = this.listening;
    void this.close();
    if (this.stopped) return;
    this.o.onDown(why, wasUp, this.reconnectMs);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      void this.connect();
    }, this.reconnectMs);
    this.reconnectTimer.unref();
    this.reconnectMs = Math.min(this.reconnectMs * 2, RECONNECT_MAX_MS);
  }

  private async close(): Promise<void> {
    this.listening = false;
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = null;
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => undefined);
  }
}
