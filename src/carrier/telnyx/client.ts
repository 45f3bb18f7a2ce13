// The Telnyx REST API v2 as the workers use it: send a message, dial a leg, call
// actions, and the lookups reconciliation asks; and, for the API, whether a number
// is in the account (GET /v2/phone_numbers). Answers are sorted into ok /
// rejected (4xx: final) / retry (429, 5xx, or no answer we could read).
//
// The send window. A send whose answer we never read (a timeout after the request
// went out, a cut connection, a body that stalls after the 200) may have been
// accepted. Sends and dials therefore carry an Idempotency-Key (our own id for
// them) and the same bytes on every retry: Telnyx replays its first successful
// answer to a repeated key for 24 hours instead of acting again, so the retry
// learns the outcome instead of sending a second message. Call Control commands
// carry a command_id, which Telnyx de-duplicates for 60 s.

import type {
  CallAction,
  CarrierClient,
  CommandResult,
  Dial,
  InventoryResult,
  LegLookup,
  LookupResult,
  MessageLookup,
  RecordingLookup,
  SendMessage,
  VoiceClient,
} from '../carrier.js';
import { parseRetryAfter } from '../../jobs/retry.js';
import { failureCode, neverReached } from '../reach.js';
import { encodeClientState, receiptStatusOf, recordingUrl } from './events.js';

export interface TelnyxClientOptions {
  apiUrl: string;
  apiKey: string;
  connectionId?: string | null;
  messagingProfileId?: string | null;
  timeoutMs?: number;
}

const CALL_ALREADY_ENDED = '90018';
/** A number in these states is not (or no longer) the account's: a failed purchase or port, released, ported away. */
const NOT_HELD = new Set(['purchase-failed', 'port-failed', 'deleted', 'ported-out']);
const NOT_ANSWERED_YET = '90034';
const INVALID_CALL_CONTROL_ID = '90015';
/** "Blocked due to STOP message": the recipient opted out of the sending number at Telnyx. */
const OPTED_OUT = '40300';
/** Messaging's own "too many requests": the sending rate of the number or profile was exceeded. */
const MESSAGE_RATE_LIMITED = '40011';
/** Recordings listed per page, and the pages read before a leg's recording counts as not listed. */
const RECORDING_PAGE_SIZE = 250;
const RECORDING_PAGES = 8;

interface TelnyxAnswer<T> {
  data?: T;
  errors?: { code?: unknown; title?: unknown; detail?: unknown }[];
}

export function telnyxClient(opts: TelnyxClientOptions): CarrierClient {
  const timeoutMs = opts.timeoutMs ?? 10_000;

  async function request<T>(
    method: 'GET' | 'POST',
    path: string,
    body: string | null,
    idempotencyKey?: string,
  ): Promise<{
    status: number | null;
    json: TelnyxAnswer<T>;
    retryAfterMs: number | null;
    date: Date;
    detail: string;
    /** No answer because the request never reached Telnyx (reach.ts). */
    unreached: boolean;
  }> {
    let res: Response;
    let text: string;
    try {
      res = await fetch(opts.apiUrl + path, {
        method,
        headers: {
          authorization: `Bearer ${opts.apiKey}`,
          accept: 'application/json',
          ...(body !== null ? { 'content-type': 'application/json' } : {}),
          ...(idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}),
        },
        ...(body !== null ? { body } : {}),
        signal: AbortSignal.timeout(timeoutMs),
      });
      // Inside the try: headers followed by a body that never finishes is as unknown an outcome as no answer.
      text = await res.text();
    } catch (err) {
      const code = failureCode(err);
      return {
        status: null,
        json: {},
        retryAfterMs: null,
        date: new Date(),
        detail: `no answer: ${code ?? (err as Error).message}`,
        unreached: neverReached(err),
      };
    }
    let json: TelnyxAnswer<T> = {};
    try {
      json = JSON.parse(text) as TelnyxAnswer<T>;
    } catch {
      // an HTML error page from a proxy: classified by status alone
    }
    const first = json.errors?.[0];
    const date = new Date(res.headers.get('date') ?? NaN);
    return {
      status: res.status,
      json,
      // Retry-After when given; else, on a 429, when its rate limit's window resets (x-ratelimit-reset, seconds).
      retryAfterMs:
        parseRetryAfter(res.headers.get('retry-after')) ??
        (res.status === 429 ? parseRetryAfter(res.headers.get('x-ratelimit-reset')) : null),
      date: Number.isNaN(date.getTime()) ? new Date() : date,
      detail: String(first?.detail ?? first?.title ?? `HTTP ${res.status}`),
      unreached: false,
    };
  }

  async function command<T>(path: string, body: object, idempotencyKey?: string): Promise<CommandResult<{ data: T }>> {
    const r = await request<T>('POST', path, JSON.stringify(body), idempotencyKey);
    if (r.status !== null && r.status >= 200 && r.status < 300 && r.json.data !== undefined)
      return { ok: true, data: r.json.data };
    // Telnyx does not say a 429 or a 5xx was left undone: only a request that never reached it certainly was.
    // A 409 is the same key still being carried out: its outcome is not known yet either.
    if (r.status === null || r.status === 409 || r.status === 429 || r.status >= 500 || r.status < 400) {
      return {
        ok: false,
        kind: 'retry',
        status: r.status,
        retryAfterMs: r.retryAfterMs,
        detail: r.detail,
        notAccepted: r.unreached,
      };
    }
    return {
      ok: false,
      kind: 'rejected',
      status: r.status,
      code: String(r.json.errors?.[0]?.code ?? r.status),
      detail: r.detail,
    };
  }

  async function lookup<T, R>(path: string, read: (data: T, observedAt: Date) => R | null): Promise<LookupResult<R>> {
    const r = await request<T>('GET', path, null);
    const code = String(r.json.errors?.[0]?.code ?? '');
    if (r.status === 404 || (r.status === 422 && code === INVALID_CALL_CONTROL_ID))
      return { ok: false, kind: 'unknown', detail: r.detail };
    if (r.status !== 200 || r.json.data === undefined) return { ok: false, kind: 'retry', detail: r.detail };
    const found = read(r.json.data, r.date);
    return found ? { ok: true, ...found } : { ok: false, kind: 'retry', detail: 'an answer we could not read' };
  }

  const voice: VoiceClient = {
    async dial(d: Dial) {
      const r = await command<{ call_control_id: string; call_leg_id: string }>(
        '/calls',
        {
          connection_id: opts.connectionId,
          to: d.to,
          from: d.from,
          timeout_secs: d.timeoutSecs,
          client_state: encodeClientState(d.echo),
          command_id: d.commandKey,
        },
        d.idempotencyKey,
      );
      return r.ok ? { ok: true, leg: r.data.call_control_id } : r;
    },
    async callAction(leg: string, a: CallAction, commandKey: string) {
      const body =
        a.action === 'bridge'
          ? { call_control_id: a.otherLeg, command_id: commandKey }
          : a.action === 'record_start'
            ? { format: a.format, channels: a.channels, command_id: commandKey }
            : { command_id: commandKey };
      const r = await command<unknown>(`/calls/${leg}/actions/${a.action}`, body);
      if (r.ok) return { ok: true, alreadyEnded: false };
      if (r.kind === 'rejected' && r.code === CALL_ALREADY_ENDED) return { ok: true, alreadyEnded: true };
      // "Call not answered yet": an answer we sent is still being carried out; asking again shortly succeeds.
      if (r.kind === 'rejected' && r.code === NOT_ANSWERED_YET)
        return { ...r, kind: 'retry', retryAfterMs: null, notAccepted: false };
      return r;
    },
    lookupRecording(recordingId: string) {
      return lookup<Record<string, unknown>, { audioUrl: string }>(
        `/recordings/${encodeURIComponent(recordingId)}`,
        (data) => {
          const { audioUrl } = recordingUrl(data['download_urls']);
          return audioUrl ? { audioUrl } : null;
        },
      );
    },
    async recordingsOfLeg(q: { leg: string; to: string; since: Date }) {
      // Telnyx lists recordings by number and time, not by call_control_id: the
      // leg's own are picked out of the answer, a page at a time.
      const recordings: RecordingLookup[] = [];
      let observedAt = new Date();
      for (let page = 1; page <= RECORDING_PAGES; page++) {
        const query = new URLSearchParams({
          'filter[to]': q.to,
          'filter[created_at][gte]': q.since.toISOString(),
          'page[number]': String(page),
          'page[size]': String(RECORDING_PAGE_SIZE),
        });
        const r = await request<Record<string, unknown>[]>('GET', `/recordings?${query}`, null);
        if (r.status !== 200 || !Array.isArray(r.json.data)) return { ok: false, kind: 'retry', detail: r.detail };
        if (page === 1) observedAt = r.date;
        for (const data of r.json.data) {
          if (data['call_control_id'] !== q.leg || data['status'] !== 'completed') continue;
          const startedAt = time(data['recording_started_at']);
          const endedAt = time(data['recording_ended_at']);
          if (typeof data['id'] !== 'string' || !startedAt || !endedAt) continue;
          recordings.push({ recordingId: data['id'], startedAt, endedAt, ...recordingUrl(data['download_urls']) });
        }
        const meta = (r.json as { meta?: { total_pages?: unknown } }).meta;
        if (
          r.json.data.length < RECORDING_PAGE_SIZE ||
          typeof meta?.total_pages !== 'number' ||
          page >= meta.total_pages
        )
          break;
      }
      return { ok: true, recordings, observedAt };
    },
    lookupLeg(leg: string) {
      return lookup<Record<string, unknown>, LegLookup>(`/calls/${leg}`, (data, observedAt) => {
        if (typeof data['is_alive'] !== 'boolean') return null;
        const duration = data['call_duration'];
        return {
          alive: data['is_alive'],
          startedAt: time(data['start_time']),
          endedAt: time(data['end_time']),
          connectedSeconds: typeof duration === 'number' && duration > 0 ? Math.floor(duration) : 0,
          observedAt,
        };
      });
    },
  };

  return {
    idempotentSends: true,
    async sendMessage(m: SendMessage) {
      // Built in one fixed order from the message alone: the same bytes on every retry.
      const r = await command<{ id: string; parts?: unknown }>(
        '/messages',
        {
          from: m.from,
          to: m.to,
          ...(m.text !== null ? { text: m.text } : {}),
          ...(m.mediaUrls.length > 0 ? { media_urls: m.mediaUrls } : {}),
          ...(opts.messagingProfileId ? { messaging_profile_id: opts.messagingProfileId } : {}),
        },
        m.idempotencyKey,
      );
      // "Slow down": not processed, so the same key and bytes may go again once the wait is over.
      if (!r.ok && (r.status === 429 || (r.kind === 'rejected' && r.code === MESSAGE_RATE_LIMITED))) {
        return {
          ok: false,
          kind: 'retry',
          status: r.status,
          retryAfterMs: r.kind === 'retry' ? r.retryAfterMs : null,
          detail: r.detail,
          notAccepted: true,
          throttled: true,
        };
      }
      if (!r.ok) return r.kind === 'rejected' && r.code === OPTED_OUT ? { ...r, reason: 'recipient_opted_out' } : r;
      const parts =
        typeof r.data.parts === 'number' && Number.isInteger(r.data.parts) && r.data.parts > 0 ? r.data.parts : null;
      return { ok: true, carrierMessageId: r.data.id, parts };
    },
    lookupMessage(carrierMessageId: string) {
      return lookup<Record<string, unknown>, MessageLookup>(
        `/messages/${encodeURIComponent(carrierMessageId)}`,
        (data, observedAt) => {
          const to = Array.isArray(data['to']) ? (data['to'][0] as Record<string, unknown> | undefined) : undefined;
          const carrierStatus = to?.['status'];
          if (typeof carrierStatus !== 'string') return null;
          const errors = Array.isArray(data['errors']) ? (data['errors'] as Record<string, unknown>[]) : [];
          const code = errors[0]?.['code'];
          return {
            carrierStatus,
            status: receiptStatusOf(carrierStatus),
            errorCode: typeof code === 'string' || typeof code === 'number' ? String(code) : null,
            at: time(data['completed_at']) ?? time(data['sent_at']) ?? observedAt,
            observedAt,
          };
        },
      );
    },
    async ownsNumber(number: string): Promise<InventoryResult> {
      // Telnyx's filter takes digits only ("non-numerical characters will result in no values") and may
      // match more than the one number: the answer is the record whose phone_number is exactly ours.
      const digits = number.replace(/^\+/, '');
      const r = await request<Record<string, unknown>[]>(
        'GET',
        `/phone_numbers?${encodeURIComponent('filter[phone_number]')}=${digits}&${encodeURIComponent('page[size]')}=250`,
        null,
      );
      if (r.status !== 200 || !Array.isArray(r.json.data)) return { ok: false, kind: 'retry', detail: r.detail };
      const owned = r.json.data.some(
        (n) => n['phone_number'] === number && !NOT_HELD.has(String(n['status']).replace(/_/g, '-')),
      );
      return { ok: true, owned };
    },
    voice,
  };
}

function time(v: unknown): Date | null {
  if (typeof v !== 'string') return null;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? null : d;
}
