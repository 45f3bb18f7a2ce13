// The rumor carrier: an in-process Telnyx stand-in. startSimulator() serves
// Telnyx's REST API under /v2 and the control API under /_sim on one Fastify
// server, and sends signed Telnyx webhooks to the profile webhook URL (or a
// resource's own). It behaves like a real carrier, including misbehaving on
// purpose (behaviour.ts: duplicates, reorders, webhooks lost for good or held
// back, answers lost after a send was carried out), deterministically for a
// given seed and request order, and it answers what a client asks when its
// webhooks went missing (GET /v2/calls/{id}, GET /v2/messages/{id}) and honours
// Idempotency-Key on its sends (idempotency.ts), so a retry never sends twice.
// It records calls (recordings.ts: call.recording.saved with signed, expiring
// URLs to real WAV files it serves itself) and transcribes them (transcription.ts:
// an OpenAI-compatible POST /v2/ai/audio/transcriptions).
// It knows which numbers its account holds (inventory.ts), as GET /v2/phone_numbers says.
// `handset sim` (cli.ts) and `handset dev` run it; tests use it in-process.

import { createPublicKey, generateKeyPairSync, randomBytes, randomUUID, type KeyObject } from 'node:crypto';
import Fastify from 'fastify';
import { pino, type Logger } from 'pino';
import { telnyxPublicKeyBase64 } from '../carrier/telnyx/signature.js';
import type { Account } from './account.js';
import { checkBehaviour, parseBehaviour, WELL_BEHAVED, type Behaviour } from './behaviour.js';
import { CallControl, type InboundCall, type InboundCallResult, type LiveLeg } from './calls.js';
import { registerControlApi } from './control.js';
import { FrontDoor, type DoorMode } from './door.js';
import { newConnectionId } from './events.js';
import { isE164, SimInputError } from './fields.js';
import { Inventory } from './inventory.js';
import { Messaging, type InboundSms } from './messages.js';
import { PersonaBook, type Persona } from './personas.js';
import { Recordings, registerRecordingFiles, type RecordingCounts } from './recordings.js';
import { freshSeed, seededRandom, type Random } from './random.js';
import { errorBody, refuse } from './refusals.js';
import { registerCarrierApi, refusal, type CarrierApiCounts, type RequestRecord } from './rest.js';
import { Scheduler } from './scheduler.js';
import { Transcriber, type TranscriptionCounts } from './transcription.js';
import { WebhookSender, type DroppedEvent, type WebhookAttempt, type WebhookCounts } from './webhooks.js';

export { envelopeBody, canonicalJson, messagingTime, voiceTime } from './events.js';
export { telnyxWebhook } from './webhook-builders.js';
export type { Behaviour } from './behaviour.js';
export type { Persona, CallPersona, SmsOutcome, RecordingOutcome } from './personas.js';
export { RECORDING_URL_TTL_MS, RECORDING_SAVED_AFTER_MS } from './recordings.js';
export { MIN_AUDIO_MS, transcriptOf } from './transcription.js';
export { readWav, toneWav, type WavInfo } from './audio.js';
export { MAGIC_PERSONAS } from './personas.js';
export { NOT_OURS } from './inventory.js';
export type { RequestRecord, AnswerFate } from './rest.js';
export type { WebhookAttempt, DeliveryCopy, DroppedEvent } from './webhooks.js';
export { EVENT_TYPES, type EventType } from './events.js';
export type { InboundSms } from './messages.js';
export type { InboundCall, InboundCallResult } from './calls.js';

export interface SimulatorOptions {
  /** 0 = any free port (the default). */
  port?: number;
  host?: string;
  /** The profile / connection webhook URL, e.g. http://127.0.0.1:3001/webhooks/telnyx. Null: only resources' own URLs. */
  webhookUrl?: string | null;
  /** The Bearer key /v2 accepts; generated when absent. */
  apiKey?: string;
  /** An Ed25519 private key; generated when absent. */
  privateKey?: KeyObject;
  /** Seeds every decision; a fresh one (see Simulator.seed) when absent. */
  seed?: string | number;
  behaviour?: Partial<Behaviour>;
  /** Persona overrides by E.164 number (on top of the magic numbers). */
  personas?: Record<string, Persona>;
  /** Multiplies every simulated delay (ring, answer, talk, receipts); 0.01 runs 100× faster. Webhook retries keep real time. */
  timeScale?: number;
  /** When set, the only connection_id POST /v2/calls accepts; any non-blank id otherwise. */
  connectionId?: string;
  messagingProfileId?: string;
  /** The wall clock (ms since the epoch): signing timestamps and the command_id window. */
  now?: () => number;
  /** The port of the REST API's front door (door.ts), what TELNYX_API_URL points at; 0 = any free port. */
  apiPort?: number;
  /** How many requests and webhook attempts are kept for inspection (oldest dropped first). */
  historyLimit?: number;
  log?: Logger;
}

export interface SimulatorCounts extends WebhookCounts, CarrierApiCounts, RecordingCounts, TranscriptionCounts {
  requests: number;
  messages: number;
  callLegs: number;
}

export interface SimulatorState {
  url: string;
  controlUrl: string;
  publicKey: string;
  seed: string;
  timeScale: number;
  webhookUrl: string | null;
  connectionId: string;
  messagingProfileId: string;
  /** Whether the REST API is up, or down and how (door.ts). */
  down: DoorMode;
  behaviour: Behaviour;
  personas: Record<string, Persona>;
  /** Numbers added to and removed from the account's inventory (every other 555 number but NOT_OURS is held). */
  numbers: { added: string[]; removed: string[] };
  counts: SimulatorCounts;
  liveCalls: LiveLeg[];
  recentRequests: RequestRecord[];
  recentWebhooks: Array<Omit<WebhookAttempt, 'body'>>;
  recentDropped: Array<Omit<DroppedEvent, 'body'>>;
}

// A type, not an interface, so it passes wherever a plain environment record is expected.
export type CarrierEnv = {
  TELNYX_API_URL: string;
  TELNYX_API_KEY: string;
  TELNYX_PUBLIC_KEY: string;
  TELNYX_CONNECTION_ID: string;
};

export interface Simulator {
  /** Base URL of the REST API, ending in /v2 (what TELNYX_API_URL points at): its front door (door.ts). */
  readonly url: string;
  /** Base URL of the control API, ending in /_sim. */
  readonly controlUrl: string;
  /** The speech-to-text endpoint, what HANDSET_TRANSCRIPTION_URL points at (…/v2/ai/audio/transcriptions). */
  readonly transcriptionUrl: string;
  readonly apiKey: string;
  /** Base64 of the raw 32-byte Ed25519 public key (TELNYX_PUBLIC_KEY). */
  readonly publicKeyBase64: string;
  readonly seed: string;
  readonly timeScale: number;
  /** The connection inbound calls arrive on (and, if configured, the only one dials accept). */
  readonly connectionId: string;
  readonly messagingProfileId: string;
  readonly webhookUrl: string | null;
  readonly behaviour: Readonly<Behaviour>;
  /** Every REST request under /v2, in arrival order. */
  readonly requests: readonly RequestRecord[];
  /** Every webhook attempt, in the order they were answered. */
  readonly webhooks: readonly WebhookAttempt[];
  /** Every event lost for good (no attempt made), in the order they were dropped. */
  readonly dropped: readonly DroppedEvent[];
  readonly counts: Readonly<SimulatorCounts>;
  /** The settings that point Handset at this simulator, as `handset sim` prints them. */
  carrierEnv(): CarrierEnv;
  setWebhookUrl(url: string | null): void;
  setBehaviour(partial: Partial<Behaviour>): Behaviour;
  setPersona(number: string, persona: Persona): void;
  /** Whether the account holds a number (GET /v2/phone_numbers finds it). */
  holdsNumber(number: string): boolean;
  /** Puts a number in the account's inventory, or takes it out (a number released or never bought). */
  addNumber(number: string): void;
  removeNumber(number: string): void;
  injectInboundSms(input: InboundSms): { messageId: string; eventId: string };
  injectInboundCall(input: InboundCall): InboundCallResult;
  /** The far end answers a ringing outgoing leg. */
  answer(callControlId: string): void;
  /** The far end hangs up (the callee of an outgoing leg, the caller of an incoming one). */
  hangup(callControlId: string, cause?: string): void;
  /** Takes the REST API down (refusing connections, answering 503, or never answering) or brings it back up. */
  setDown(mode: DoorMode): Promise<void>;
  readonly down: DoorMode;
  /** POSTs an arbitrary body, signed with a fresh timestamp, once; resolves to the status. */
  deliver(body: string, url?: string): Promise<number>;
  state(): SimulatorState;
  /** Resolves when no timer is armed and no webhook is in flight. */
  idle(): Promise<void>;
  /** Cancels everything pending and forgets all state; behaviour, personas and the random stream restart. */
  reset(): void;
  close(): Promise<void>;
}

const DEFAULT_HISTORY_LIMIT = 50_000;
const RECENT = 50;

export async function startSimulator(opts: SimulatorOptions = {}): Promise<Simulator> {
  const log = opts.log ?? pino({ enabled: false });
  const timeScale = opts.timeScale ?? 1;
  if (!(timeScale > 0) || !Number.isFinite(timeScale)) throw new SimInputError('timeScale must be a positive number');
  let webhookUrl = checkWebhookUrl(opts.webhookUrl ?? null);
  const apiKey =
    opts.apiKey ?? `KEY${randomBytes(16).toString('hex').toUpperCase()}_${randomBytes(16).toString('base64url')}`;
  const privateKey = opts.privateKey ?? generateKeyPairSync('ed25519').privateKey;
  if (privateKey.asymmetricKeyType !== 'ed25519') throw new SimInputError('privateKey must be an Ed25519 private key');
  const publicKeyBase64 = telnyxPublicKeyBase64(createPublicKey(privateKey));
  const seed = String(opts.seed ?? freshSeed());
  const initialBehaviour = checkBehaviour({ ...WELL_BEHAVED, ...parseBehaviour(opts.behaviour ?? {}) });
  const historyLimit = opts.historyLimit ?? DEFAULT_HISTORY_LIMIT;

  let behaviour: Behaviour = { ...initialBehaviour };
  let stream: Random = seededRandom(seed);
  const requests: RequestRecord[] = [];
  const webhooks: WebhookAttempt[] = [];
  const dropped: DroppedEvent[] = [];
  let requestSeq = 0;
  let webhookSeq = 0;
  let droppedSeq = 0;

  const scheduler = new Scheduler(timeScale, opts.now ?? (() => performance.timeOrigin + performance.now()), log);
  const personas = new PersonaBook(opts.personas ?? {});
  const sender = new WebhookSender({
    privateKey,
    scheduler,
    random: () => stream(),
    behaviour: () => behaviour,
    record: (a) => keep(webhooks, { seq: ++webhookSeq, ...a }, historyLimit),
    recordDropped: (d) => keep(dropped, { seq: ++droppedSeq, ...d }, historyLimit),
    log,
  });
  const configuredConnection = opts.connectionId;
  const account: Account = {
    organizationId: randomUUID(),
    messagingProfileId: opts.messagingProfileId ?? randomUUID(),
    connectionId: configuredConnection ?? newConnectionId(),
    tcrCampaignId: `C${randomBytes(4).toString('hex').toUpperCase().slice(0, 6)}`,
    acceptsConnection: (id) => (configuredConnection === undefined ? id.trim() !== '' : id === configuredConnection),
    webhookUrl: () => webhookUrl,
    behaviour: () => behaviour,
    random: () => stream(),
    scheduler,
    sender,
    personas,
    log,
  };
  const messaging = new Messaging(account);
  // Known once listening (port 0 picks one); the recording URLs point here.
  let base = '';
  const recordings = new Recordings(account, () => base);
  const calls = new CallControl(account, recordings);
  const transcriber = new Transcriber(account);
  const inventory = new Inventory();

  const app = Fastify({ logger: false, bodyLimit: 1024 * 1024, forceCloseConnections: true, return503OnClosing: true });
  // The bytes as they came, for Idempotency-Key (the same request is the same body byte for byte).
  const rawBodies = new WeakMap<object, string>();
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, text, done) => {
    if (typeof text === 'string') rawBodies.set(req, text);
    if (typeof text !== 'string' || text.trim() === '') return done(null, undefined);
    try {
      done(null, JSON.parse(text));
    } catch {
      done(Object.assign(new Error('The request body is not valid JSON.'), { statusCode: 400 }), undefined);
    }
  });
  // Uploads (speech to text) arrive whole and are parsed by the route (multipart.ts); its limit is the route's.
  app.addContentTypeParser('multipart/form-data', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
  app.setErrorHandler(async (err: Error & { statusCode?: number }, req, reply) => {
    const status = err.statusCode ?? 500;
    if (status >= 500) log.error({ err, url: req.url }, 'simulator request failed');
    if (req.url.startsWith('/_sim'))
      return reply.code(status).send({ error: status >= 500 ? 'internal error' : err.message });
    if (status >= 500) return reply.code(500).send(errorBody(refuse.serverError(500)));
    return refusal(reply, { ...refuse.malformedBody(err.message), status });
  });

  const carrierApi = registerCarrierApi(app, {
    apiKey,
    account,
    messaging,
    calls,
    recordings,
    transcriber,
    inventory,
    rawBody: (req) => rawBodies.get(req) ?? '',
    record: (r) => keep(requests, { seq: ++requestSeq, ...r }, historyLimit),
  });

  registerRecordingFiles(app, recordings);
  const door = new FrontDoor(app, opts.host ?? '127.0.0.1', () => ({
    contentType: 'application/json',
    body: JSON.stringify(errorBody(refuse.serverError(503))),
  }));

  const sim: Simulator = {
    get url() {
      return `${door.url}/v2`;
    },
    get controlUrl() {
      return `${base}/_sim`;
    },
    get transcriptionUrl() {
      return `${base}/v2/ai/audio/transcriptions`;
    },
    apiKey,
    publicKeyBase64,
    seed,
    timeScale,
    connectionId: account.connectionId,
    messagingProfileId: account.messagingProfileId,
    get webhookUrl() {
      return webhookUrl;
    },
    get behaviour() {
      return { ...behaviour };
    },
    requests,
    webhooks,
    dropped,
    get counts() {
      return {
        requests: requestSeq,
        messages: messaging.count,
        callLegs: calls.count,
        ...sender.counts,
        ...carrierApi.counts,
        ...recordings.counts,
        ...transcriber.counts,
      };
    },
    carrierEnv: () => ({
      TELNYX_API_URL: sim.url,
      TELNYX_API_KEY: apiKey,
      TELNYX_PUBLIC_KEY: publicKeyBase64,
      TELNYX_CONNECTION_ID: account.connectionId,
    }),
    setWebhookUrl(url) {
      webhookUrl = checkWebhookUrl(url);
    },
    setBehaviour(partial) {
      // Checked whole before it replaces anything: a refused change changes nothing.
      behaviour = checkBehaviour({ ...behaviour, ...parseBehaviour(partial) });
      return { ...behaviour };
    },
    setPersona(number, persona) {
      if (!isE164(number)) throw new SimInputError('a persona belongs to an E.164 number');
      personas.set(number, persona);
    },
    setDown: (mode) => door.setMode(mode),
    get down() {
      return door.mode;
    },
    holdsNumber: (number) => inventory.holds(number),
    addNumber(number) {
      if (!isE164(number)) throw new SimInputError('the inventory holds E.164 numbers');
      inventory.add(number);
    },
    removeNumber(number) {
      if (!isE164(number)) throw new SimInputError('the inventory holds E.164 numbers');
      inventory.remove(number);
    },
    injectInboundSms: (input) => messaging.receive(input),
    injectInboundCall: (input) => calls.inbound(input),
    answer: (id) => calls.farEndAnswer(id),
    hangup: (id, cause) => calls.farEndHangup(id, cause),
    async deliver(body, url) {
      const target = url ?? webhookUrl;
      if (!target) throw new SimInputError('deliver needs a URL: no webhookUrl is configured');
      const { status, error } = await sender.deliverRaw(body, target);
      if (status === null) throw new Error(`no answer from ${target}: ${error}`);
      return status;
    },
    state() {
      return {
        url: sim.url,
        controlUrl: sim.controlUrl,
        publicKey: publicKeyBase64,
        seed,
        timeScale,
        webhookUrl,
        connectionId: account.connectionId,
        messagingProfileId: account.messagingProfileId,
        down: door.mode,
        behaviour: { ...behaviour },
        personas: personas.list(),
        numbers: inventory.changes(),
        counts: sim.counts,
        liveCalls: calls.live(),
        recentRequests: requests.slice(-RECENT),
        recentWebhooks: webhooks.slice(-RECENT).map(({ body: _body, ...rest }) => rest),
        recentDropped: dropped.slice(-RECENT).map(({ body: _body, ...rest }) => rest),
      };
    },
    idle: () => scheduler.idle(),
    reset() {
      void door.setMode('up');
      scheduler.cancelAll();
      carrierApi.forget();
      messaging.reset();
      calls.reset();
      recordings.reset();
      transcriber.reset();
      personas.reset();
      inventory.reset();
      behaviour = { ...initialBehaviour };
      stream = seededRandom(seed);
      requests.length = 0;
      webhooks.length = 0;
      dropped.length = 0;
      requestSeq = 0;
      webhookSeq = 0;
      droppedSeq = 0;
      sender.forget();
    },
    async close() {
      scheduler.cancelAll();
      carrierApi.forget();
      await door.close();
      await app.close();
    },
  };
  registerControlApi(app, sim);

  await app.listen({ port: opts.port ?? 0, host: opts.host ?? '127.0.0.1' });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('the simulator is not listening on a TCP port');
  base = `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;
  await door.open(opts.apiPort ?? 0);
  log.info({ url: sim.url, webhookUrl, seed, timeScale }, 'telnyx simulator listening');
  return sim;
}

function checkWebhookUrl(url: string | null): string | null {
  if (url === null || url === '') return null;
  try {
    const u = new URL(url);
    if (u.protocol === 'http:' || u.protocol === 'https:') return url;
  } catch {
    // reported below
  }
  throw new SimInputError(`webhookUrl must be an http(s) URL, got "${url}"`);
}

/** Appends, dropping the oldest in chunks once past the limit (the counts keep the totals). */
function keep<T>(list: T[], item: T, limit: number): T {
  list.push(item);
  if (list.length > limit + Math.max(1, Math.floor(limit / 10))) list.splice(0, list.length - limit);
  return item;
}
