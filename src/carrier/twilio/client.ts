// Twilio's REST API (2010-04-01) as the workers use it, for messaging: send
// (POST …/Messages.json, form in, JSON out, Basic auth with the account SID and
// auth token), look a message up (GET …/Messages/{sid}.json), search for one we
// may have sent (GET …/Messages.json?From=&To=), and whether a number is the
// account's (GET …/IncomingPhoneNumbers.json?PhoneNumber=). Calls stay on Telnyx:
// no voice client.
//
// The send window. Twilio takes no idempotency key on a send: a create that
// timed out, was cut, or answered a 5xx may have sent the message, and sending
// it again would send it twice. So a send whose outcome is unknown is never
// repeated here; the dispatcher first looks for the message Twilio may already
// have (findSent). Only a request that never reached Twilio, and a 429 (which
// Twilio documents as never processed), certainly sent nothing. Every send's
// StatusCallback carries our message id, which Twilio keeps with the message
// and signs on each callback, so a callback still says whose message it is when
// the create's answer was lost.

import { parseRetryAfter } from '../../jobs/retry.js';
import type {
  CarrierClient,
  CommandResult,
  FoundMessage,
  InventoryResult,
  LookupResult,
  MessageLookup,
  SendMessage,
  SentQuery,
} from '../carrier.js';
import { failureCode, neverReached } from '../reach.js';
import { MARKER, receiptStatusOf } from './events.js';

export interface TwilioClientOptions {
  /** https://api.twilio.com, or the simulator's base. */
  apiUrl: string;
  accountSid: string;
  authToken: string;
  /** The ingest's public base URL, as Twilio reaches it (read at each send: it may be learned after start). */
  publicIngestUrl: () => string;
  timeoutMs?: number;
}

/** The recipient opted out (texted STOP to the sender): Twilio refuses the send. */
const OPTED_OUT = '21610';
/** Pages of 100 read when searching for a message, newest first. */
const SEARCH_PAGES = 5;
const SEARCH_PAGE_SIZE = 100;

interface Answer {
  status: number | null;
  json: Record<string, unknown>;
  retryAfterMs: number | null;
  date: Date;
  detail: string;
  unreached: boolean;
}

export function twilioClient(opts: TwilioClientOptions): CarrierClient {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const base = `${opts.apiUrl}/2010-04-01/Accounts/${encodeURIComponent(opts.accountSid)}`;
  const auth = `Basic ${Buffer.from(`${opts.accountSid}:${opts.authToken}`).toString('base64')}`;

  async function request(method: 'GET' | 'POST', path: string, form: URLSearchParams | null): Promise<Answer> {
    let res: Response;
    let text: string;
    try {
      res = await fetch(path.startsWith('/2010-04-01/') ? opts.apiUrl + path : base + path, {
        method,
        headers: {
          authorization: auth,
          accept: 'application/json',
          ...(form ? { 'content-type': 'application/x-www-form-urlencoded' } : {}),
        },
        ...(form ? { body: form.toString() } : {}),
        signal: AbortSignal.timeout(timeoutMs),
      });
      text = await res.text();
    } catch (err) {
      return {
        status: null,
        json: {},
        retryAfterMs: null,
        date: new Date(),
        detail: `no answer: ${failureCode(err) ?? (err as Error).message}`,
        unreached: neverReached(err),
      };
    }
    let json: Record<string, unknown> = {};
    try {
      const parsed = JSON.parse(text) as unknown;
      if (parsed && typeof parsed === 'object') json = parsed as Record<string, unknown>;
    } catch {
      // an error page from a proxy: judged by its status alone
    }
    const date = new Date(res.headers.get('date') ?? Number.NaN);
    return {
      status: res.status,
      json,
      retryAfterMs: parseRetryAfter(res.headers.get('retry-after')),
      date: Number.isNaN(date.getTime()) ? new Date() : date,
      detail: typeof json['message'] === 'string' ? json['message'] : `HTTP ${res.status}`,
      unreached: false,
    };
  }

  return {
    idempotentSends: false,
    async sendMessage(m: SendMessage): Promise<CommandResult<{ carrierMessageId: string; parts: number | null }>> {
      const form = new URLSearchParams({ To: m.to, From: m.from });
      if (m.text !== null && m.text !== '') form.append('Body', m.text);
      for (const url of m.mediaUrls) form.append('MediaUrl', url);
      form.append(
        'StatusCallback',
        `${opts.publicIngestUrl()}/webhooks/twilio?${MARKER}=${encodeURIComponent(m.idempotencyKey)}`,
      );
      const r = await request('POST', '/Messages.json', form);
      const sid = r.json['sid'];
      if (r.status !== null && r.status >= 200 && r.status < 300 && typeof sid === 'string' && sid !== '') {
        return { ok: true, carrierMessageId: sid, parts: partsOf(r.json['num_segments']) };
      }
      if (r.status === null || r.status >= 500 || r.status < 400 || r.status === 429) {
        return {
          ok: false,
          kind: 'retry',
          status: r.status,
          retryAfterMs: r.retryAfterMs,
          detail: r.detail,
          // "Never processed and always safe to retry" (20429); anything else may have been.
          notAccepted: r.unreached || r.status === 429,
          throttled: r.status === 429,
        };
      }
      const code = String(r.json['code'] ?? r.status);
      return {
        ok: false,
        kind: 'rejected',
        status: r.status,
        code,
        detail: r.detail,
        ...(code === OPTED_OUT ? { reason: 'recipient_opted_out' as const } : {}),
      };
    },

    async lookupMessage(sid: string): Promise<LookupResult<MessageLookup>> {
      const r = await request('GET', `/Messages/${encodeURIComponent(sid)}.json`, null);
      if (r.status === 404) return { ok: false, kind: 'unknown', detail: r.detail };
      const status = r.json['status'];
      if (r.status !== 200 || typeof status !== 'string') return { ok: false, kind: 'retry', detail: r.detail };
      const receipt = receiptStatusOf(status);
      const terminal = receipt === 'delivered' || receipt === 'failed';
      const code = r.json['error_code'];
      return {
        ok: true,
        carrierStatus: status,
        status: receipt,
        errorCode: code === null || code === undefined || code === '' ? null : String(code),
        // Twilio dates a message's last change; for a final status that is when it got there.
        at: (terminal ? rfc2822(r.json['date_updated']) : null) ?? r.date,
        observedAt: r.date,
      };
    },

    async findSent(q: SentQuery): Promise<LookupResult<{ found: FoundMessage[] }>> {
      const found: FoundMessage[] = [];
      let path: string | null =
        `/Messages.json?${new URLSearchParams({ From: q.from, To: q.to, PageSize: String(SEARCH_PAGE_SIZE) })}`;
      for (let page = 0; path && page < SEARCH_PAGES; page++) {
        const r = await request('GET', path, null);
        const list = r.json['messages'];
        if (r.status !== 200 || !Array.isArray(list)) return { ok: false, kind: 'retry', detail: r.detail };
        let older = false;
        for (const item of list as Record<string, unknown>[]) {
          const createdAt = rfc2822(item['date_created']);
          if (!createdAt || typeof item['sid'] !== 'string') continue;
          if (createdAt < q.since) {
            older = true;
            continue;
          }
          if (!String(item['direction'] ?? '').startsWith('outbound')) continue;
          if ((item['body'] ?? '') !== (q.text ?? '')) continue;
          if (Number(item['num_media'] ?? 0) !== q.mediaUrls.length) continue;
          found.push({ carrierMessageId: item['sid'], parts: partsOf(item['num_segments']), createdAt });
        }
        const next = r.json['next_page_uri'];
        path = !older && typeof next === 'string' && next !== '' ? next : null;
      }
      return { ok: true, found };
    },

    async ownsNumber(number: string): Promise<InventoryResult> {
      const r = await request(
        'GET',
        `/IncomingPhoneNumbers.json?${new URLSearchParams({ PhoneNumber: number })}`,
        null,
      );
      const list = r.json['incoming_phone_numbers'];
      if (r.status !== 200 || !Array.isArray(list)) return { ok: false, kind: 'retry', detail: r.detail };
      return { ok: true, owned: list.some((n) => (n as Record<string, unknown>)['phone_number'] === number) };
    },

    // Calls stay on Telnyx; the seam takes a voice client here once Twilio carries them.
    voice: null,
  };
}

/** num_segments as Twilio writes it (a string; "0" before a Messaging Service picked a sender): a count or null. */
function partsOf(v: unknown): number | null {
  const n = typeof v === 'string' ? Number(v) : typeof v === 'number' ? v : Number.NaN;
  return Number.isInteger(n) && n > 0 ? n : null;
}

/** Twilio's dates: RFC 2822 in GMT ("Thu, 24 Aug 2023 05:01:45 +0000"). */
function rfc2822(v: unknown): Date | null {
  if (typeof v !== 'string') return null;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? null : d;
}
