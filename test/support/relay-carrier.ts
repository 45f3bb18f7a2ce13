// "Relay", a second carrier that exists only in tests: SMS only, with wire formats
// and a signature scheme of its own (HMAC-SHA256 over "<t>.<body>", unlike
// Telnyx's Ed25519), so a test can show the core (ingest, workers, outbox,
// reconciliation) carries a carrier it was not written for. Two halves:
// - relayAdapter(): the CarrierAdapter Handset is given, as a real carrier's
//   folder would provide it;
// - startRelay(): the carrier itself, a loopback HTTP server that accepts sends
//   (replaying its answer to a repeated Idempotency-Key), answers lookups (of a
//   text, and whether a number is the account's: all are but `notOurs`), and
//   posts signed webhooks to ingest — late, twice, under a new id, or never.

import { createHmac, randomUUID, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  type CarrierAdapter,
  type CarrierClient,
  type CarrierEvent,
  type CarrierEventKind,
  type Envelope,
  MalformedCarrierEvent,
  type ReceiptStatus,
  type ReconciledFact,
} from '../../src/carrier/carrier.js';

const SIGNATURE_HEADER = 'relay-signature';

/** Relay's words for a text's fate, and what each means for ours. */
const STATUS: Record<string, ReceiptStatus> = { accepted: 'sent', delivered: 'delivered', undeliverable: 'failed' };

export function signRelay(secret: string, t: number, body: string): string {
  return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.${body}`).digest('hex')}`;
}

export function relayAdapter(opts: {
  secret: string;
  apiUrl: string | null;
  toleranceSeconds?: number;
}): CarrierAdapter {
  const tolerance = opts.toleranceSeconds ?? 300;
  const client: CarrierClient | null = opts.apiUrl ? relayClient(opts.apiUrl) : null;
  return {
    name: 'relay',
    verify(raw, headers, nowSeconds) {
      const header = headers[SIGNATURE_HEADER];
      if (typeof header !== 'string') return 'missing_signature';
      const m = /^t=(\d{1,12}),v1=([0-9a-f]{64})$/.exec(header);
      if (!m) return 'malformed_signature';
      const t = Number(m[1]);
      if (Math.abs(nowSeconds - t) > tolerance) return 'stale_timestamp';
      const want = createHmac('sha256', opts.secret).update(`${t}.`).update(raw).digest();
      return timingSafeEqual(want, Buffer.from(m[2]!, 'hex')) ? null : 'bad_signature';
    },
    envelope(body): Envelope | null {
      const b = body as { id?: unknown; type?: unknown; sms?: { ref?: unknown } } | null;
      if (!b || typeof b.id !== 'string' || !b.id || typeof b.type !== 'string' || !b.type) return null;
      return { eventId: b.id, eventType: b.type, subject: typeof b.sms?.ref === 'string' ? b.sms.ref : null };
    },
    parse(payload): CarrierEvent {
      const p = payload as { type: string; at?: string; reconciled?: boolean; sms?: Record<string, unknown> };
      const source = p.reconciled === true ? 'reconciliation' : 'webhook';
      const sms = p.sms ?? {};
      const str = (k: string) => {
        const v = sms[k];
        if (typeof v !== 'string') throw new MalformedCarrierEvent(`${p.type} without sms.${k}`);
        return v;
      };
      const occurredAt = new Date(p.at ?? Number.NaN);
      if (p.type !== 'sms.inbound' && p.type !== 'sms.status') return { kind: 'unknown', eventType: p.type, source };
      if (Number.isNaN(occurredAt.getTime())) throw new MalformedCarrierEvent(`${p.type} without a time`);
      if (p.type === 'sms.inbound') {
        return {
          kind: 'message.received',
          source,
          occurredAt,
          carrierMessageId: str('ref'),
          from: str('from'),
          to: str('to'),
          text: str('text'),
          mediaUrls: [],
        };
      }
      const carrierStatus = str('status');
      return {
        kind: 'message.receipt',
        source,
        occurredAt,
        eventType: p.type,
        carrierMessageId: str('ref'),
        carrierStatus,
        status: STATUS[carrierStatus] ?? 'progress',
        errorCode: typeof sms['reason'] === 'string' ? sms['reason'] : null,
      };
    },
    eventTypes: (kind: CarrierEventKind) =>
      kind === 'message.received' ? ['sms.inbound'] : kind === 'message.receipt' ? ['sms.status'] : [],
    reconciled(fact: ReconciledFact) {
      if (fact.kind !== 'message.finalized') throw new Error('relay carries no calls');
      const id = `reconcile:${fact.carrierMessageId}:${fact.carrierStatus}`;
      const body = {
        id,
        type: 'sms.status',
        at: fact.at.toISOString(),
        reconciled: true,
        sms: { ref: fact.carrierMessageId, status: fact.carrierStatus, reason: fact.errorCode },
      };
      return [{ eventId: id, eventType: 'sms.status', subject: fact.carrierMessageId, rawJson: JSON.stringify(body) }];
    },
    carriesCalls: false,
    client,
    settings: { verify: 'RELAY_SECRET', client: 'RELAY_URL' },
  };
}

function relayClient(apiUrl: string): CarrierClient {
  const call = async (method: string, path: string, body?: object, key?: string) => {
    try {
      const res = await fetch(`${apiUrl}${path}`, {
        method,
        headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(5000),
      });
      return { status: res.status, json: (await res.json().catch(() => ({}))) as Record<string, unknown> };
    } catch (err) {
      return { status: null, json: { error: (err as Error).message } };
    }
  };
  return {
    idempotentSends: true,
    async sendMessage(m) {
      const r = await call('POST', '/texts', { from: m.from, to: m.to, text: m.text ?? '' }, m.idempotencyKey);
      if (r.status === 200)
        return { ok: true, carrierMessageId: String(r.json['ref']), parts: Number(r.json['parts']) };
      if (r.status !== null && r.status >= 400 && r.status < 500 && r.status !== 429) {
        return { ok: false, kind: 'rejected', status: r.status, code: String(r.json['error']), detail: 'refused' };
      }
      return {
        ok: false,
        kind: 'retry',
        status: r.status,
        retryAfterMs: null,
        detail: String(r.json['error'] ?? ''),
        notAccepted: false,
      };
    },
    async lookupMessage(ref) {
      const r = await call('GET', `/texts/${encodeURIComponent(ref)}`);
      if (r.status === 404) return { ok: false, kind: 'unknown', detail: 'relay keeps no such text' };
      if (r.status !== 200) return { ok: false, kind: 'retry', detail: `relay answered ${r.status}` };
      const carrierStatus = String(r.json['status']);
      return {
        ok: true,
        carrierStatus,
        status: STATUS[carrierStatus] ?? 'progress',
        errorCode: typeof r.json['reason'] === 'string' ? r.json['reason'] : null,
        at: new Date(String(r.json['at'])),
        observedAt: new Date(String(r.json['now'])),
      };
    },
    async ownsNumber(number) {
      const r = await call('GET', `/numbers/${encodeURIComponent(number)}`);
      if (r.status === 200) return { ok: true, owned: true };
      if (r.status === 404) return { ok: true, owned: false };
      return { ok: false, kind: 'retry', detail: `relay answered ${r.status}` };
    },
    voice: null,
  };
}

export interface RelayText {
  ref: string;
  from: string;
  to: string;
  text: string;
  status: 'accepted' | 'delivered' | 'undeliverable';
  at: string;
}

export interface Relay {
  url: string;
  /** Where it posts webhooks (ingest's /webhooks/relay), set once ingest listens. */
  webhookUrl: string;
  /** Every send it accepted, by ref; a replayed Idempotency-Key is not a new one. */
  texts: Map<string, RelayText>;
  /** Sends it was asked for, replays included. */
  sends: { key: string | null; replayed: boolean }[];
  /** Webhooks it posted, with ingest's answer. */
  posted: { body: string; status: number }[];
  /** What happens to the next status webhooks: posted once, twice (the second under a new id), or never. */
  statusWebhooks: 'once' | 'twice_new_id' | 'never';
  /** Texts to these numbers end undeliverable. */
  unreachable: Set<string>;
  /** Numbers not in the relay account (every other number is). */
  notOurs: Set<string>;
  /** Posts an inbound text to ingest, as relay would; returns the posted body. */
  inbound(from: string, to: string, text: string, opts?: { id?: string; ref?: string }): Promise<string>;
  /** Posts the exact bytes again (a retry of the same webhook). */
  repost(body: string): Promise<number>;
  close(): Promise<void>;
}

export async function startRelay(opts: { secret: string }): Promise<Relay> {
  const texts = new Map<string, RelayText>();
  const answers = new Map<string, string>();
  const sends: Relay['sends'] = [];
  const posted: Relay['posted'] = [];
  const post = async (body: string) => {
    const res = await fetch(relay.webhookUrl, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        [SIGNATURE_HEADER]: signRelay(opts.secret, Math.floor(Date.now() / 1000), body),
      },
      body,
    });
    posted.push({ body, status: res.status });
    return res.status;
  };
  const status = (t: RelayText, id: string) =>
    JSON.stringify({ id, type: 'sms.status', at: t.at, sms: { ref: t.ref, status: t.status } });

  const relay: Relay = {
    url: '',
    webhookUrl: '',
    texts,
    sends,
    posted,
    statusWebhooks: 'once',
    unreachable: new Set(),
    notOurs: new Set(),
    async inbound(from, to, text, o = {}) {
      const body = JSON.stringify({
        id: o.id ?? `evt-${randomUUID()}`,
        type: 'sms.inbound',
        at: new Date().toISOString(),
        sms: { ref: o.ref ?? `in-${randomUUID()}`, from, to, text },
      });
      await post(body);
      return body;
    },
    repost: post,
    close: () => new Promise((r) => server.close(() => r())),
  };

  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c: Buffer) => (raw += c.toString('utf8')));
    req.on('end', () => {
      const answer = (code: number, body: object) => {
        res.writeHead(code, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      };
      const number = /^\/numbers\/([^/]+)$/.exec(req.url ?? '');
      if (req.method === 'GET' && number) {
        const n = decodeURIComponent(number[1]!);
        return relay.notOurs.has(n) ? answer(404, { error: 'not_ours' }) : answer(200, { number: n });
      }
      const lookup = /^\/texts\/([^/]+)$/.exec(req.url ?? '');
      if (req.method === 'GET' && lookup) {
        const t = texts.get(decodeURIComponent(lookup[1]!));
        return t ? answer(200, { ...t, now: new Date().toISOString() }) : answer(404, { error: 'no_such_text' });
      }
      if (req.method !== 'POST' || req.url !== '/texts') return answer(404, { error: 'no_such_route' });
      const key = (req.headers['idempotency-key'] as string | undefined) ?? null;
      const replay = key ? answers.get(key) : undefined;
      sends.push({ key, replayed: replay !== undefined });
      if (replay) return res.writeHead(200, { 'content-type': 'application/json' }).end(replay);
      const m = JSON.parse(raw) as { from?: string; to?: string; text?: string };
      if (!m.to || !m.from) return answer(400, { error: 'missing_number' });
      const t: RelayText = {
        ref: `txt-${randomUUID()}`,
        from: m.from,
        to: m.to,
        text: m.text ?? '',
        status: 'accepted',
        at: new Date().toISOString(),
      };
      texts.set(t.ref, t);
      const body = JSON.stringify({ ref: t.ref, parts: Math.max(1, Math.ceil(t.text.length / 160)) });
      if (key) answers.set(key, body);
      res.writeHead(200, { 'content-type': 'application/json' }).end(body);
      // The handset reaches its fate a moment later, and relay says so (or does not).
      setTimeout(() => {
        t.status = relay.unreachable.has(t.to) ? 'undeliverable' : 'delivered';
        t.at = new Date().toISOString();
        const mode = relay.statusWebhooks;
        if (mode === 'never') return;
        void post(status(t, `evt-${randomUUID()}`)).then(() =>
          mode === 'twice_new_id' ? post(status(t, `evt-${randomUUID()}`)) : undefined,
        );
      }, 50);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  relay.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return relay;
}
