// The simulated carrier's front door: the address its REST API is reached at,
// which can be taken down the ways a real carrier goes down, to exercise
// failover and unknown outcomes.
//
//   up      requests go through
//   refuse  nothing listens: every new connection is refused (and the open ones
//           are closed), so a client knows its request never reached the carrier
//   error   every request is answered 503 at the door, nothing done
//   stall   every request is carried out, and its answer never sent: the client
//           waits until it gives up, not knowing what happened
//
// The door is a server of its own in front of the simulator's routes (the control
// API stays reachable on the simulator's own address, to bring the door back).

import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';

export const DOOR_MODES = ['up', 'refuse', 'error', 'stall'] as const;
export type DoorMode = (typeof DOOR_MODES)[number];

export const isDoorMode = (v: unknown): v is DoorMode => DOOR_MODES.includes(v as DoorMode);

export interface DoorCounts {
  /** Requests answered 503 at the door. */
  refusedWithError: number;
  /** Requests carried out whose answer was withheld. */
  stalled: number;
  /** Times the door stopped listening. */
  closings: number;
}

export class FrontDoor {
  private server: http.Server;
  private sockets = new Set<Socket>();
  private held = new Set<ServerResponse>();
  private port = 0;
  private current: DoorMode = 'up';
  counts: DoorCounts = { refusedWithError: 0, stalled: 0, closings: 0 };

  constructor(
    private readonly app: FastifyInstance,
    private readonly host: string,
    /** The carrier's own 503 body. */
    private readonly errorBody: () => { contentType: string; body: string },
  ) {
    this.server = http.createServer((req, res) => this.handle(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  get mode(): DoorMode {
    return this.current;
  }

  /** The base URL, e.g. http://127.0.0.1:41234. */
  get url(): string {
    return `http://${this.host.includes(':') ? `[${this.host}]` : this.host}:${this.port}`;
  }

  async open(port = 0): Promise<string> {
    await this.listen(port);
    this.port = (this.server.address() as AddressInfo).port;
    return this.url;
  }

  async setMode(mode: DoorMode): Promise<void> {
    const was = this.current;
    this.current = mode;
    if (mode !== 'stall') this.release();
    if (mode === 'refuse' && was !== 'refuse') {
      this.counts.closings++;
      await new Promise<void>((resolve) => {
        this.server.close(() => resolve());
        for (const s of this.sockets) s.destroy();
      });
    } else if (mode !== 'refuse' && was === 'refuse') {
      // The same port again: the carrier's address does not change when it comes back.
      await this.listen(this.port);
    }
  }

  async close(): Promise<void> {
    this.release();
    for (const s of this.sockets) s.destroy();
    if (this.server.listening) await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private listen(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, this.host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
  }

  /** Withheld answers end (their connections cut): the clients gave up on them long ago. */
  private release(): void {
    for (const res of this.held) res.socket?.destroy();
    this.held.clear();
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    if (this.current === 'error') {
      this.counts.refusedWithError++;
      const { contentType, body } = this.errorBody();
      req.resume();
      res.writeHead(503, { 'content-type': contentType }).end(body);
      return;
    }
    if (this.current === 'stall') {
      // Carried out as usual; whatever it answers goes nowhere.
      this.counts.stalled++;
      this.held.add(res);
      res.on('close', () => this.held.delete(res));
      res.writeHead = (() => res) as typeof res.writeHead;
      res.write = (() => true) as typeof res.write;
      res.end = (() => res) as typeof res.end;
    }
    this.app.routing(req, res);
  }
}
