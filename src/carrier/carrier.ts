// The carrier seam. A carrier adapter (today only carrier/telnyx) turns the bytes a
// carrier posts into a verified envelope and then into a normalized CarrierEvent;
// a carrier client sends the carrier commands. A second carrier is a new folder
// implementing these two interfaces, not a change to ingest or the workers.

import type { IncomingHttpHeaders } from 'node:http';

/** What a carrier's delivery receipt means for our message. */
export type ReceiptStatus =
  | 'sent' // accepted upstream: history only
  | 'delivered' // terminal
  | 'failed' // terminal
  | 'progress' // queued/sending and other intermediate words: history only
  | 'unconfirmed'; // the carrier will never know: history only, the message stays sent

export type CarrierEvent =
  | {
      kind: 'message.received';
      occurredAt: Date;
      carrierMessageId: string;
      from: string;
      to: string;
      text: string;
      mediaUrls: string[];
    }
  | {
      kind: 'message.receipt';
      occurredAt: Date;
      eventType: string;
      carrierMessageId: string;
      carrierStatus: string;
      status: ReceiptStatus;
      errorCode: string | null;
    }
  | {
      kind: 'call.initiated';
      occurredAt: Date;
      callControlId: string;
      callLegId: string;
      callSessionId: string;
      direction: 'inbound' | 'outbound';
      from: string;
      to: string;
      clientState: unknown;
    }
  | {
      kind: 'call.answered';
      occurredAt: Date;
      callControlId: string;
      callLegId: string;
      clientState: unknown;
    }
  | {
      kind: 'call.hangup';
      occurredAt: Date;
      callControlId: string;
      callLegId: string;
      clientState: unknown;
      hangupCause: string;
      hangupSource: string | null;
      startedAt: Date | null;
      endedAt: Date | null;
    }
  | { kind: 'unknown'; eventType: string };

export type CarrierEventKind = CarrierEvent['kind'];

export interface Envelope {
  eventId: string;
  eventType: string;
}

/** Why a webhook was refused before anything was parsed or stored. */
export type VerifyFailure = 'missing_signature' | 'malformed_signature' | 'stale_timestamp' | 'bad_signature';

export interface CarrierAdapter {
  readonly name: string;
  /** Checks the signature over the raw bytes; null when the webhook is authentic. */
  verify(raw: Buffer, headers: IncomingHttpHeaders, nowSeconds: number): VerifyFailure | null;
  /** The carrier's event id and type from a parsed body, or null if it is not an envelope. */
  envelope(body: unknown): Envelope | null;
  /** Normalizes a stored payload. Throws MalformedCarrierEvent when a known type is missing fields. */
  parse(payload: unknown): CarrierEvent;
}

export class MalformedCarrierEvent extends Error {
  override name = 'MalformedCarrierEvent';
}

/** What the carrier said to a command. */
export type CommandResult<T = unknown> =
  | ({ ok: true } & T)
  | { ok: false; kind: 'rejected'; status: number; code: string; detail: string } // 4xx: do not retry
  | { ok: false; kind: 'retry'; status: number | null; retryAfterMs: number | null; detail: string }; // 429, 5xx, network

export interface SendMessage {
  from: string;
  to: string;
  text: string | null;
  mediaUrls: string[];
}

export interface Dial {
  from: string;
  to: string;
  timeoutSecs: number;
  /** Echoed by the carrier on every webhook of the new leg. */
  clientState: unknown;
  /** The carrier ignores a repeated command id for 60 s, so a quick re-run does not dial twice. */
  commandId: string;
  /** Bridge the new leg to this existing leg when it answers. */
  linkTo?: string;
}

export type CallAction =
  | { action: 'answer' }
  | { action: 'hangup' }
  | { action: 'reject' }
  | { action: 'bridge'; otherCallControlId: string };

/** The carrier's REST API, as the workers use it. */
export interface CarrierClient {
  readonly name: string;
  sendMessage(m: SendMessage): Promise<CommandResult<{ carrierMessageId: string }>>;
  dial(d: Dial): Promise<CommandResult<{ callControlId: string; callLegId: string }>>;
  /**
   * "The call has already ended" counts as success (for a hangup the wanted state
   * holds), reported as `alreadyEnded` for the callers to whom it means more.
   */
  callAction(callControlId: string, a: CallAction, commandId: string): Promise<CommandResult<{ alreadyEnded: boolean }>>;
}
