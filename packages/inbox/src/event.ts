// A Handset event, read from a body whose signature has verified: what the
// handler gets, and what ordering needs from it (the subject and its sequence).

/** What Handset sends: `data` is the resource (message, call, …) after the transition. */
export interface HandsetEvent<Data = Record<string, unknown>> {
  id: string;
  type: string;
  /** ISO time of the transition. */
  timestamp: string;
  account_id: string;
  data: Data;
}

/** The event as the handler gets it. */
export interface InboxEvent<Data = Record<string, unknown>> extends HandsetEvent<Data> {
  /**
   * True when an event with a higher `data.sequence` for the same subject was
   * handled before this one arrived (only ever true under `deliver-stale`:
   * `skip-stale` does not call the handler for it).
   */
  stale: boolean;
}

export type Parsed =
  | { ok: true; event: HandsetEvent; subject: string | null; sequence: number | null }
  | { ok: false; reason: string };

/** The event in `text`, which must be the one `webhookId` names. */
export function parseEvent(text: string, webhookId: string): Parsed {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { ok: false, reason: 'the body is not JSON' };
  }
  if (!isObject(value)) return { ok: false, reason: 'the body is not a JSON object' };
  const { id, type, data } = value;
  if (typeof id !== 'string' || typeof type !== 'string' || type === '' || !isObject(data)) {
    return { ok: false, reason: 'not a Handset event (id, type and data)' };
  }
  // The id the signature covers is the one remembered: a body naming another is not this delivery's event.
  if (id !== webhookId) return { ok: false, reason: 'the event id is not the webhook-id' };
  const subject = typeof data['id'] === 'string' && data['id'] !== '' ? data['id'] : null;
  const sequence = data['sequence'];
  if (sequence === undefined || sequence === null) return { ok: true, event: value as never, subject, sequence: null };
  if (!Number.isSafeInteger(sequence) || (sequence as number) < 0) {
    return { ok: false, reason: 'data.sequence is not a non-negative integer' };
  }
  return { ok: true, event: value as never, subject, sequence: sequence as number };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
