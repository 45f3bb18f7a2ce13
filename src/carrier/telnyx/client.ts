// The Telnyx REST API v2 as the workers use it: send a message, dial a leg, and
// call actions. Answers are sorted into ok / rejected (4xx: final) / retry
// (429, 5xx, no answer: the job retries with backoff, honouring retry-after).
// Telnyx has no idempotency key for messaging; Call Control commands carry a
// command_id that Telnyx de-duplicates for 60 s.

import type { CallAction, CarrierClient, CommandResult, Dial, SendMessage } from '../carrier.js';
import { encodeClientState } from './events.js';

export interface TelnyxClientOptions {
  apiUrl: string;
  apiKey: string;
  connectionId?: string | null;
  messagingProfileId?: string | null;
  timeoutMs?: number;
}

const CALL_ALREADY_ENDED = '90018';

export function telnyxClient(opts: TelnyxClientOptions): CarrierClient {
  const timeoutMs = opts.timeoutMs ?? 10_000;

  async function post<T>(path: string, body: object): Promise<CommandResult<{ data: T }>> {
    let res: Response;
    try {
      res = await fetch(opts.apiUrl + path, {
        method: 'POST',
        headers: { authorization: `Bearer ${opts.apiKey}`, 'content-type': 'application/json', accept: 'application/json' },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (err) {
      return { ok: false, kind: 'retry', status: null, retryAfterMs: null, detail: `no answer: ${(err as Error).message}` };
    }
    const text = await res.text();
    let json: { data?: T; errors?: { code?: unknown; title?: unknown; detail?: unknown }[] } = {};
    try {
      json = JSON.parse(text) as typeof json;
    } catch {
      // an HTML error page from a proxy: classified by status alone
    }
    if (res.ok && json.data !== undefined) return { ok: true, data: json.data };
    const first = json.errors?.[0];
    const detail = String(first?.detail ?? first?.title ?? `HTTP ${res.status}`);
    if (res.status === 429 || res.status >= 500 || res.ok) {
      return { ok: false, kind: 'retry', status: res.status, retryAfterMs: parseRetryAfter(res.headers.get('retry-after')), detail };
    }
    return { ok: false, kind: 'rejected', status: res.status, code: String(first?.code ?? res.status), detail };
  }

  return {
    name: 'telnyx',
    async sendMessage(m: SendMessage) {
      const r = await post<{ id: string }>('/messages', {
        from: m.from,
        to: m.to,
        ...(m.text !== null ? { text: m.text } : {}),
        ...(m.mediaUrls.length > 0 ? { media_urls: m.mediaUrls } : {}),
        ...(opts.messagingProfileId ? { messaging_profile_id: opts.messagingProfileId } : {}),
      });
      return r.ok ? { ok: true, carrierMessageId: r.data.id } : r;
    },
    async dial(d: Dial) {
      const r = await post<{ call_control_id: string; call_leg_id: string }>('/calls', {
        connection_id: opts.connectionId,
        to: d.to,
        from: d.from,
        timeout_secs: d.timeoutSecs,
        client_state: encodeClientState(d.clientState),
        command_id: d.commandId,
        ...(d.linkTo ? { link_to: d.linkTo, bridge_on_answer: true } : {}),
      });
      return r.ok ? { ok: true, callControlId: r.data.call_control_id, callLegId: r.data.call_leg_id } : r;
    },
    async callAction(callControlId: string, a: CallAction, commandId: string) {
      const body = a.action === 'bridge' ? { call_control_id: a.otherCallControlId, command_id: commandId } : { command_id: commandId };
      const r = await post<unknown>(`/calls/${callControlId}/actions/${a.action}`, body);
      if (r.ok) return { ok: true, alreadyEnded: false };
      if (r.kind === 'rejected' && r.code === CALL_ALREADY_ENDED) return { ok: true, alreadyEnded: true };
      return r;
    },
  };
}

/** retry-after in seconds or as an HTTP date; null when absent or unreadable. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | null {
  if (!value) return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}
