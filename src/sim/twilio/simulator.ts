// The Twilio stand-in: Twilio's Programmable Messaging wire format, misbehaving
// like Twilio. startTwilioSimulator() serves the 2010-04-01 REST API behind a
// front door that can be taken down (../door.ts) and a control API under /_sim on
// its own address, and posts signed status callbacks and inbound messages
// (callbacks.ts).
//
//   POST /2010-04-01/Accounts/{AC}/Messages.json          send (form; Basic auth); 201 with the message
//   GET  /2010-04-01/Accounts/{AC}/Messages/{SM}.json     the message as Twilio knows it now
//   GET  /2010-04-01/Accounts/{AC}/Messages.json          the account's messages, newest first (From, To, PageSize, Page)
//   GET  /2010-04-01/Accounts/{AC}/IncomingPhoneNumbers.json?PhoneNumber=   the account's numbers (../inventory.ts)
//
// What it does as Twilio does: no idempotency key (a repeated create is a second
// message), no callback for the initial status (`queued`), callbacks without ids
// or times that may come twice, late, out of order, or before the create was
// answered (earlyReceiptRate), a recipient who texted STOP refused with 21610, and
// num_segments counted as Twilio counts them. The recipient's persona (the same
// magic numbers as the Telnyx simulator, ../personas.ts) decides each message's
// fate: delivered, undelivered (30003), failed (30008), refused at send (21211),
// or sent and never finalized.
//
// Every create is recorded with the marker its StatusCallback carried (Handset's
// message id), so a test counts exactly how many messages Twilio accepted for each.

import { randomBytes } from 'node:crypto';
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import { pino, type Logger } from 'pino';
import { MARKER } from '../../carrier/twilio/events.js';
import { checkBehaviour, parseBehaviour, retryAfterSeconds, WELL_BEHAVED, type Behaviour } from '../behaviour.js';
import { registerCommonControls } from '../control.js';
import { FrontDoor, type DoorMode } from '../door.js';
import { isE164, SimInputError } from '../fields.js';
import { Inventory } from '../inventory.js';
import { PersonaBook, SMS_FINALIZED_AFTER_MS, SMS_SENT_AFTER_MS, type Persona } from '../personas.js';
import { freshSeed, seededRandom, type Random } from '../random.js';
import { Scheduler } from '../scheduler.js';
import { segmentsOf } from '../segments.js';
import { CallbackSender, type CallbackAttempt } from './callbacks.js';

export const API_VERSION = '2010-04-01';
const OPT_OUT = new Set(['STOP', 'STOPALL', 'UNSUBSCRIBE', 'CANCEL', 'END', 'QUIT', 'REVOKE', 'OPTOUT']);
const OPT_IN = new Set(['START', 'UNSTOP']);
const MAX_BODY = 1600;
const MAX_MEDIA = 10;
const RECENT = 50;

export interface TwilioSimulatorOptions {
  /** The control API's port (0 = any free port, the default). */
  port?: number;
  /** The REST API's front door port, what TWILIO_API_URL points at (0 = any free port). */
  apiPort?: number;
  host?: string;
  /** Where inbound messages go (the numbers' SmsUrl), e.g. http://127.0.0.1:3001/webhooks/twilio. */
  smsUrl?: string | null;
  accountSid?: string;
  authToken?: string;
  seed?: string | number;
  behaviour?: Partial<Behaviour>;
  personas?: Record<string, Persona>;
  /** Multiplies the simulated delays between a message's callbacks. */
  timeScale?: number;
  log?: Logger;
}

export type TwilioStatus = 'queued' | 'sending' | 'sent' | 'delivered' | 'undelivered' | 'failed' | 'received';

export interface TwilioMessage {
  sid: string;
  direction: 'outbound-api' | 'inbound';
  from: string;
  to: string;
  body: string;
  mediaUrls: string[];
  numSegments: number;
  status: TwilioStatus;
  errorCode: number | null;
  dateCreated: number;
  dateSent: number | null;
  dateUpdated: number;
  statusCallback: string | null;
  /** Our (Handset's) message id, from the StatusCallback query. */
  marker: string | null;
}

/** One POST …/Messages.json: what it was asked, what Twilio made of it, and what became of its answer. */
export interface CreateRecord {
  seq: number;
  at: string;
  from: string | null;
  to: string | null;
  marker: string | null;
  /** The HTTP status decided on (a lost answer's too). */
  status: number;
  /** The message created, when one was. */
  sid: string | null;
  answer: 'sent' | 'lost';
}

export type TwilioCarrierEnv = { TWILIO_ACCOUNT_SID: string; TWILIO_AUTH_TOKEN: string; TWILIO_API_URL: string };

export interface TwilioSimulator {
  /** The REST API's base (its front door), what TWILIO_API_URL points at. */
  readonly url: string;
  readonly controlUrl: string;
  readonly accountSid: string;
  readonly authToken: string;
  readonly seed: string;
  readonly creates: readonly CreateRecord[];
  readonly callbacks: readonly CallbackAttempt[];
  readonly down: DoorMode;
  /** Messages Twilio created whose StatusCallback carried this marker (Handset's message id). */
  acceptedFor(marker: string): number;
  /** Every message created, by its marker; Handset's message id → how many Twilio accepted. */
  acceptedByMarker(): Map<string, number>;
  message(sid: string): TwilioMessage | undefined;
  carrierEnv(): TwilioCarrierEnv;
  /** Where inbound messages go (the numbers' SmsUrl). */
  readonly webhookUrl: string | null;
  setWebhookUrl(url: string | null): void;
  holdsNumber(number: string): boolean;
  setBehaviour(partial: Partial<Behaviour>): Behaviour;
  setPersona(number: string, persona: Persona): void;
  setDown(mode: DoorMode): Promise<void>;
  addNumber(number: string): void;
  removeNumber(number: string): void;
  injectInboundSms(input: { from: string; to: string; text?: string; media_urls?: string[] }): { sid: string };
  state(): Record<string, unknown>;
  idle(): Promise<void>;
  reset(): void;
  close(): Promise<void>;
}

const rfc2822 = (ms: number | null) => (ms === null ? null : new Date(ms).toUTCString().replace('GMT', '+0000'));
const newSid = (prefix: string) => `${prefix}${randomBytes(16).toString('hex')}`;

export async function startTwilioSimulator(opts: TwilioSimulatorOptions = {}): Promise<TwilioSimulator> {
  const log = opts.log ?? pino({ enabled: false });
  const host = opts.host ?? '127.0.0.1';
  const accountSid = opts.accountSid ?? newSid('AC');
  const authToken = opts.authToken ?? randomBytes(16).toString('hex');
  const seed = String(opts.seed ?? freshSeed());
  const initial = checkBehaviour({ ...WELL_BEHAVED, ...parseBehaviour(opts.behaviour ?? {}) });
  let behaviour: Behaviour = { ...initial };
  let stream: Random = seededRandom(seed);
  let smsUrl = opts.smsUrl ?? null;
  const scheduler = new Scheduler(opts.timeScale ?? 1, () => performance.timeOrigin + performance.now(), log);
  const personas = new PersonaBook(opts.personas ?? {});
  const inventory = new Inventory();
  const messages = new Map<string, TwilioMessage>();
  /** Pairs (our number, recipient) whose recipient texted STOP. */
  const blocked = new Set<string>();
  const creates: CreateRecord[] = [];
  const callbacks: CallbackAttempt[] = [];
  let createSeq = 0;
  let callbackSeq = 0;
  const sender = new CallbackSender({
    authToken,
    scheduler,
    random: () => stream(),
    behaviour: () => behaviour,
    record: (a) => callbacks.push({ seq: ++callbackSeq, ...a }),
    log,
  });
  const wall = () => scheduler.wallNow();

  const resource = (m: TwilioMessage) => ({
    sid: m.sid,
    account_sid: accountSid,
    messaging_service_sid: null,
    from: m.from,
    to: m.to,
    body: m.body,
    num_segments: String(m.numSegments),
    num_media: String(m.mediaUrls.length),
    status: m.status,
    direction: m.direction,
    error_code: m.errorCode,
    error_message: null,
    price: null,
    price_unit: 'USD',
    date_created: rfc2822(m.dateCreated),
    date_sent: rfc2822(m.dateSent),
    date_updated: rfc2822(m.dateUpdated),
    api_version: API_VERSION,
    uri: `/${API_VERSION}/Accounts/${accountSid}/Messages/${m.sid}.json`,
  });
  const error = (reply: FastifyReply, status: number, code: number, message: string) =>
    reply.code(status).send({ code, message, more_info: `https://www.twilio.com/docs/errors/${code}`, status });

  const app = Fastify({ logger: false, bodyLimit: 1024 * 1024, forceCloseConnections: true });
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_req, body, done) =>
    done(null, [...new URLSearchParams(String(body))]),
  );

  /** A message's status moves, and Twilio says so (or not, or twice, or late). */
  const move = (m: TwilioMessage, status: TwilioStatus, errorCode: number | null, early: boolean) => {
    m.status = status;
    m.errorCode = errorCode;
    m.dateUpdated = wall();
    if (status === 'sent') m.dateSent = m.dateUpdated;
    if (!m.statusCallback) return Promise.resolve();
    const p = personas.lookup(m.to);
    const type = status === 'sent' ? 'message.sent' : 'message.finalized';
    const params: [string, string][] = [
      ['SmsSid', m.sid],
      ['SmsStatus', status],
      ['MessageStatus', status],
      ['To', m.to],
      ['MessageSid', m.sid],
      ['AccountSid', accountSid],
      ['From', m.from],
      ['ApiVersion', API_VERSION],
      ...(errorCode !== null ? ([['ErrorCode', String(errorCode)]] as [string, string][]) : []),
    ];
    const hold = p.delivery.hold[type];
    return sender.send(m.statusCallback, params, {
      lane: m.sid,
      lose: p.delivery.lose.includes(type),
      holdMs: hold === undefined ? null : hold * scheduler.timeScale,
      early,
    });
  };

  /** The callbacks a persona's message makes, in order: [delay after the previous, status, error code]. */
  const story = (to: string): [number, TwilioStatus, number | null][] => {
    const p = personas.lookup(to);
    switch (p.sms) {
      case 'delivered':
        return [
          [SMS_SENT_AFTER_MS, 'sent', null],
          [SMS_FINALIZED_AFTER_MS, 'delivered', null],
        ];
      case 'delivery_failed':
        return [
          [SMS_SENT_AFTER_MS, 'sent', null],
          [SMS_FINALIZED_AFTER_MS, 'undelivered', 30003],
        ];
      case 'sending_failed':
        return [[SMS_SENT_AFTER_MS, 'failed', 30008]];
      case 'expired':
        return [[SMS_SENT_AFTER_MS, 'failed', 30036]];
      case 'delivery_unconfirmed':
      case 'sent_only':
        return [[SMS_SENT_AFTER_MS, 'sent', null]];
      case 'rejected':
        return [];
    }
  };

  const authorized = (req: FastifyRequest, reply: FastifyReply, sid: string): boolean => {
    const want = `Basic ${Buffer.from(`${accountSid}:${authToken}`).toString('base64')}`;
    if (req.headers.authorization !== want) {
      void error(reply, 401, 20003, 'Authentication Error - invalid username');
      return false;
    }
    if (sid !== accountSid) {
      void error(reply, 404, 20404, 'The requested resource was not found');
      return false;
    }
    return true;
  };

  void app.register(
    async (api) => {
      api.addHook('preHandler', async () => {
        if (behaviour.sendLatencyMs > 0) await scheduler.sleepReal(behaviour.sendLatencyMs);
      });

      api.post<{ Params: { sid: string } }>('/Accounts/:sid/Messages.json', async (req, reply) => {
        if (!authorized(req, reply, req.params.sid)) return reply;
        const form = new Map<string, string[]>();
        for (const [k, v] of (req.body as [string, string][] | undefined) ?? [])
          form.set(k, [...(form.get(k) ?? []), v]);
        const get = (k: string) => form.get(k)?.[0] ?? null;
        const callback = get('StatusCallback');
        let marker: string | null = null;
        try {
          marker = callback ? new URL(callback).searchParams.get(MARKER) : null;
        } catch {
          return error(reply, 400, 21609, 'Invalid StatusCallback');
        }
        const record = (status: number, sid: string | null) =>
          creates.push({
            seq: ++createSeq,
            at: new Date(wall()).toISOString(),
            from: get('From'),
            to: get('To'),
            marker,
            status,
            sid,
            answer: 'sent',
          });
        if (behaviour.rateLimitRate > 0 && stream() < behaviour.rateLimitRate) {
          record(429, null);
          return error(
            reply.header('retry-after', String(retryAfterSeconds(behaviour))),
            429,
            20429,
            'Too Many Requests',
          );
        }
        if (behaviour.serverErrorRate > 0 && stream() < behaviour.serverErrorRate) {
          record(500, null);
          return error(reply, 500, 20500, 'Internal Server Error');
        }
        const to = get('To');
        const from = get('From');
        const body = get('Body') ?? '';
        const media = form.get('MediaUrl') ?? [];
        // What Twilio refuses, in the order it checks, with its error codes.
        const refused: [number, string] | null = !isE164(to)
          ? [21211, `The 'To' number ${to ?? ''} is not a valid phone number.`]
          : !isE164(from)
            ? [21212, `The 'From' number ${from ?? ''} is not a valid phone number.`]
            : body === '' && media.length === 0
              ? [21619, 'A text message body or media urls must be specified.']
              : body.length > MAX_BODY
                ? [21617, 'The concatenated message body exceeds the 1600 character limit.']
                : media.length > MAX_MEDIA || !media.every((u) => /^https?:\/\//.test(u))
                  ? [21623, 'Invalid media URL(s)']
                  : personas.lookup(to).sms === 'rejected'
                    ? [21211, `The 'To' number ${to} is not a valid phone number.`]
                    : blocked.has(`${from} ${to}`)
                      ? [21610, 'Attempt to send to unsubscribed recipient']
                      : null;
        if (refused || !isE164(to) || !isE164(from)) {
          record(400, null);
          return error(reply, 400, refused?.[0] ?? 21211, refused?.[1] ?? 'Invalid number');
        }

        const now = wall();
        const m: TwilioMessage = {
          sid: newSid('SM'),
          direction: 'outbound-api',
          from,
          to,
          body,
          mediaUrls: media,
          numSegments: media.length > 0 ? 1 : segmentsOf(body, false).parts,
          status: 'queued',
          errorCode: null,
          dateCreated: now,
          dateSent: null,
          dateUpdated: now,
          statusCallback: callback,
          marker,
        };
        messages.set(m.sid, m);
        record(201, m.sid);
        const answer = resource(m);
        const steps = story(to);
        if (stream() < behaviour.earlyReceiptRate) {
          // Twilio's callbacks raced ahead of its own answer.
          for (const [, status, code] of steps) if (!scheduler.signal.aborted) await move(m, status, code, true);
        } else {
          let after = 0;
          for (const [delay, status, code] of steps) {
            after += delay;
            scheduler.after(after, () => move(m, status, code, false));
          }
          if (personas.lookup(to).sms === 'delivered' && stream() < behaviour.contradictionRate) {
            scheduler.after(after + 500, () => move(m, 'undelivered', 30003, false));
          }
        }
        if (behaviour.lostAnswerRate > 0 && stream() < behaviour.lostAnswerRate) {
          creates[creates.length - 1]!.answer = 'lost';
          reply.hijack();
          req.raw.socket.destroy();
          return reply;
        }
        return reply.code(201).send(answer);
      });

      api.get<{ Params: { sid: string; message: string } }>('/Accounts/:sid/Messages/:message', async (req, reply) => {
        if (!authorized(req, reply, req.params.sid)) return reply;
        const m = messages.get(req.params.message.replace(/\.json$/, ''));
        if (!m) return error(reply, 404, 20404, `The requested resource ${req.url} was not found`);
        return resource(m);
      });

      api.get<{ Params: { sid: string }; Querystring: Record<string, string | undefined> }>(
        '/Accounts/:sid/Messages.json',
        async (req, reply) => {
          if (!authorized(req, reply, req.params.sid)) return reply;
          const q = req.query;
          const size = Math.min(1000, Math.max(1, Number(q['PageSize'] ?? 50) || 50));
          const page = Math.max(0, Number(q['Page'] ?? 0) || 0);
          const all = [...messages.values()]
            .filter((m) => (!q['To'] || m.to === q['To']) && (!q['From'] || m.from === q['From']))
            .reverse();
          const slice = all.slice(page * size, (page + 1) * size);
          const uri = (p: number) =>
            `/${API_VERSION}/Accounts/${accountSid}/Messages.json?${new URLSearchParams({
              ...(q['To'] ? { To: q['To'] } : {}),
              ...(q['From'] ? { From: q['From'] } : {}),
              PageSize: String(size),
              Page: String(p),
            })}`;
          return {
            messages: slice.map(resource),
            page,
            page_size: size,
            start: page * size,
            end: page * size + slice.length - 1,
            uri: uri(page),
            first_page_uri: uri(0),
            previous_page_uri: page > 0 ? uri(page - 1) : null,
            next_page_uri: (page + 1) * size < all.length ? uri(page + 1) : null,
          };
        },
      );

      api.get<{ Params: { sid: string }; Querystring: Record<string, string | undefined> }>(
        '/Accounts/:sid/IncomingPhoneNumbers.json',
        async (req, reply) => {
          if (!authorized(req, reply, req.params.sid)) return reply;
          const n = req.query['PhoneNumber'];
          const held = n && inventory.holds(n) ? [n] : [];
          return {
            incoming_phone_numbers: held.map((number) => ({
              sid: `PN${Buffer.from(number).toString('hex').padEnd(32, '0').slice(0, 32)}`,
              account_sid: accountSid,
              phone_number: number,
              sms_url: smsUrl,
              capabilities: { sms: true, mms: true, voice: true },
            })),
            page: 0,
            page_size: 50,
            next_page_uri: null,
          };
        },
      );

      api.setNotFoundHandler(async (req, reply) =>
        error(reply, 404, 20404, `The requested resource ${req.url} was not found`),
      );
    },
    { prefix: `/${API_VERSION}` },
  );

  const door = new FrontDoor(app, host, () => ({
    contentType: 'application/json',
    body: JSON.stringify({ code: 20503, message: 'Service Unavailable', more_info: '', status: 503 }),
  }));

  const sim: TwilioSimulator = {
    get url() {
      return door.url;
    },
    get controlUrl() {
      return `${base}/_sim`;
    },
    accountSid,
    authToken,
    seed,
    creates,
    callbacks,
    get down() {
      return door.mode;
    },
    acceptedFor: (marker) => creates.filter((c) => c.marker === marker && c.sid !== null).length,
    acceptedByMarker() {
      const out = new Map<string, number>();
      for (const c of creates) if (c.marker && c.sid) out.set(c.marker, (out.get(c.marker) ?? 0) + 1);
      return out;
    },
    message: (sid) => messages.get(sid),
    carrierEnv: () => ({ TWILIO_ACCOUNT_SID: accountSid, TWILIO_AUTH_TOKEN: authToken, TWILIO_API_URL: door.url }),
    get webhookUrl() {
      return smsUrl;
    },
    setWebhookUrl(url) {
      smsUrl = url;
    },
    holdsNumber: (n) => inventory.holds(n),
    setBehaviour(partial) {
      behaviour = checkBehaviour({ ...behaviour, ...parseBehaviour(partial) });
      return { ...behaviour };
    },
    setPersona(number, persona) {
      if (!isE164(number)) throw new SimInputError('a persona belongs to an E.164 number');
      personas.set(number, persona);
    },
    setDown: (mode) => door.setMode(mode),
    addNumber: (n) => inventory.add(n),
    removeNumber: (n) => inventory.remove(n),
    injectInboundSms(input) {
      if (!isE164(input.from) || !isE164(input.to)) throw new SimInputError('from and to must be E.164 numbers');
      const text = input.text ?? '';
      const media = input.media_urls ?? [];
      if (text === '' && media.length === 0) throw new SimInputError('an inbound message needs text or media_urls');
      const now = wall();
      const m: TwilioMessage = {
        sid: newSid('SM'),
        direction: 'inbound',
        from: input.from,
        to: input.to,
        body: text,
        mediaUrls: media,
        numSegments: media.length > 0 ? 1 : segmentsOf(text, false).parts,
        status: 'received',
        errorCode: null,
        dateCreated: now,
        dateSent: now,
        dateUpdated: now,
        statusCallback: null,
        marker: null,
      };
      messages.set(m.sid, m);
      const word = text.trim().toUpperCase();
      if (OPT_OUT.has(word)) blocked.add(`${m.to} ${m.from}`);
      if (OPT_IN.has(word)) blocked.delete(`${m.to} ${m.from}`);
      if (smsUrl) {
        const params: [string, string][] = [
          ['ToCountry', 'US'],
          ['SmsMessageSid', m.sid],
          ['NumMedia', String(media.length)],
          ...media.flatMap((u, i): [string, string][] => [
            [`MediaContentType${i}`, 'image/jpeg'],
            [`MediaUrl${i}`, u],
          ]),
          ['SmsSid', m.sid],
          ['SmsStatus', 'received'],
          ['Body', text],
          ['To', m.to],
          ['NumSegments', String(m.numSegments)],
          ['MessageSid', m.sid],
          ['AccountSid', accountSid],
          ['From', m.from],
          ['ApiVersion', API_VERSION],
        ];
        const p = personas.lookup(m.from);
        void sender.send(smsUrl, params, { lane: m.sid, lose: p.delivery.lose.includes('message.received') });
      }
      return { sid: m.sid };
    },
    state() {
      return {
        url: door.url,
        controlUrl: sim.controlUrl,
        accountSid,
        seed,
        smsUrl,
        down: door.mode,
        behaviour: { ...behaviour },
        counts: {
          messages: messages.size,
          creates: creates.length,
          accepted: creates.filter((c) => c.sid !== null).length,
          answersLost: creates.filter((c) => c.answer === 'lost').length,
          ...sender.counts,
          ...door.counts,
        },
        recentCreates: creates.slice(-RECENT),
        recentCallbacks: callbacks.slice(-RECENT),
      };
    },
    idle: () => scheduler.idle(),
    reset() {
      void door.setMode('up');
      scheduler.cancelAll();
      sender.forget();
      messages.clear();
      blocked.clear();
      creates.length = 0;
      callbacks.length = 0;
      personas.reset();
      inventory.reset();
      behaviour = { ...initial };
      stream = seededRandom(seed);
    },
    async close() {
      scheduler.cancelAll();
      await door.close();
      await app.close();
    },
  };

  // The control API, on the simulator's own address (it stays up when the door is down).
  void app.register(
    async (c) => {
      registerCommonControls(c, sim);
      c.get<{ Querystring: { marker?: string } }>('/accepted', async (req) => ({
        marker: req.query.marker ?? null,
        accepted: req.query.marker ? sim.acceptedFor(req.query.marker) : creates.filter((x) => x.sid).length,
      }));
      c.post('/inbound/sms', async (req) =>
        sim.injectInboundSms((req.body ?? {}) as { from: string; to: string; text?: string; media_urls?: string[] }),
      );
    },
    { prefix: '/_sim' },
  );

  await app.listen({ port: opts.port ?? 0, host });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('the simulator is not listening on a TCP port');
  const base = `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;
  await door.open(opts.apiPort ?? 0);
  log.info({ url: door.url, smsUrl, seed }, 'twilio simulator listening');
  return sim;
}
