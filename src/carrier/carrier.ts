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

/** Where a carrier fact came from: its webhook, or our lookup of the resource at the carrier. */
export type FactSource = 'webhook' | 'reconciliation';

export type CarrierEvent = (
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
      /**
       * Whether the leg was ever connected, as far as the hangup says: true (it was),
       * false (it never was: a timeout, busy, rejected, canceled), null (cannot tell).
       */
      connected: boolean | null;
      startedAt: Date | null;
      endedAt: Date | null;
    }
  | { kind: 'unknown'; eventType: string }
) & { source: FactSource };

export type CarrierEventKind = CarrierEvent['kind'];

export interface Envelope {
  eventId: string;
  eventType: string;
  /** The carrier resource the event is about (a leg's control id, a message id), when it names one. */
  subject: string | null;
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
  /** The carrier's event types that normalize to `kind` (to look for stored events of a kind). */
  eventTypes(kind: CarrierEventKind): readonly string[];
  /**
   * A fact learned from a lookup, as events in the carrier's own wire format with
   * deterministic ids, so they are stored, de-duplicated and applied exactly like
   * webhooks (and a late webhook of the same fact finds nothing left to do).
   */
  reconciled(fact: ReconciledFact): ReconciledEvent[];
}

/** What reconciliation learned about a leg or a message, in our vocabulary. */
export type ReconciledFact =
  | {
      kind: 'leg.answered';
      leg: ReconciledLeg;
      answeredAt: Date;
    }
  | {
      kind: 'leg.ended';
      leg: ReconciledLeg;
      /** Seconds the leg was connected (0: never answered). */
      connectedSeconds: number;
      startedAt: Date | null;
      endedAt: Date;
    }
  | {
      kind: 'message.finalized';
      carrierMessageId: string;
      to: string;
      carrierStatus: string;
      errorCode: string | null;
      at: Date;
    };

export interface ReconciledLeg {
  callControlId: string;
  carrierLegId: string | null;
  /** Our state for the leg (what we put in client_state when we dialed it), or null for a caller. */
  clientState: unknown;
  from: string;
  to: string;
}

export interface ReconciledEvent {
  eventId: string;
  eventType: string;
  subject: string;
  rawJson: string;
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
  /**
   * Our id for the send (the message id): the carrier replays its answer to a
   * repeated key instead of sending again, so a send whose outcome we could not
   * learn is repeated with it, never turned into a second message.
   */
  idempotencyKey: string;
}

export interface Dial {
  from: string;
  to: string;
  timeoutSecs: number;
  /** Echoed by the carrier on every webhook of the new leg. */
  clientState: unknown;
  /** The carrier ignores a repeated command id for 60 s, so a quick re-run does not dial twice. */
  commandId: string;
  /** Our id for the dial (the leg id): a repeated key is answered with the first dial's leg, not a second call. */
  idempotencyKey: string;
  /** Bridge the new leg to this existing leg when it answers. */
  linkTo?: string;
}

export type CallAction =
  | { action: 'answer' }
  | { action: 'hangup' }
  | { action: 'reject' }
  | { action: 'bridge'; otherCallControlId: string };

/** A leg as the carrier knows it now. `observedAt` is the carrier's clock (its Date header) when it answered. */
export interface LegLookup {
  alive: boolean;
  startedAt: Date | null;
  endedAt: Date | null;
  /** Seconds the leg has been (or was) connected; 0 when it never answered. */
  connectedSeconds: number;
  observedAt: Date;
}

export interface MessageLookup {
  carrierStatus: string;
  status: ReceiptStatus;
  errorCode: string | null;
  /** When the carrier reached that status (completed or sent time), else when it answered. */
  at: Date;
  observedAt: Date;
}

/** A lookup's answer: the resource, or "the carrier no longer knows it" (it keeps call data only briefly). */
export type LookupResult<T> =
  | ({ ok: true } & T)
  | { ok: false; kind: 'unknown'; detail: string }
  | { ok: false; kind: 'retry'; detail: string };

/** The carrier's REST API, as the workers use it. */
export interface CarrierClient {
  readonly name: string;
  sendMessage(m: SendMessage): Promise<CommandResult<{ carrierMessageId: string; parts: number | null }>>;
  dial(d: Dial): Promise<CommandResult<{ callControlId: string; callLegId: string }>>;
  /**
   * "The call has already ended" counts as success (for a hangup the wanted state
   * holds), reported as `alreadyEnded` for the callers to whom it means more.
   */
  callAction(
    callControlId: string,
    a: CallAction,
    commandId: string,
  ): Promise<CommandResult<{ alreadyEnded: boolean }>>;
  lookupLeg(callControlId: string): Promise<LookupResult<LegLookup>>;
  lookupMessage(carrierMessageId: string): Promise<LookupResult<MessageLookup>>;
}
