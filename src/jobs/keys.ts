// Every job Handset runs, declared once: the task names, their payloads (the
// graphile-worker Tasks interface the typed enqueue checks against), the job
// keys that collapse repeated decisions into one waiting job, and the named
// queues (lanes) that make jobs run one at a time. Task names are stable strings:
// a job enqueued by one release is run by the next. SQL that needs a key is handed
// it as a parameter from here, never spells it.

import type { AttemptTrigger } from '../delivery/deliveries.sql.js';

export const TASKS = [
  'carrier_event.process',
  'message.dispatch',
  'call.dial',
  'call.command',
  'call.connect',
  'call.record',
  'recording.fetch',
  'recording.transcribe',
  'delivery.attempt',
  'delivery.recover',
  'reconcile',
  'reconcile.lookup',
  'maintenance',
] as const;
export type TaskName = (typeof TASKS)[number];

/** What reconciliation can be asked to look up now. */
export type LookupTarget =
  | { kind: 'leg'; legId: string }
  | { kind: 'caller'; callId: string }
  | { kind: 'message'; messageId: string }
  /**
   * A recorded call's recording, until it is saved or the carrier says there is
   * none: `listedNone` counts the lookups that found nothing (absent: the hangup's
   * request, which waits one bound before the first).
   */
  | { kind: 'recording'; callId: string; listedNone?: number };

/** `attempt` counts a task's own retries (1 = the first run); `since` (ISO) starts a retry policy's window. */
export interface Payloads {
  /** Only jobs an earlier release queued: a stored carrier event is its own job now (carrier/relay.ts). */
  'carrier_event.process': { eventId: string; attempt?: number };
  'message.dispatch': { messageId: string; attempt?: number };
  'call.dial': { legId: string; attempt?: number };
  /** A command to one carrier leg (its carrier reference); `commandKey` is what the carrier de-duplicates. */
  'call.command': {
    carrier: string;
    carrierRef: string;
    action: 'hangup' | 'reject';
    commandKey: string;
    attempt?: number;
    since?: string;
  };
  /** Inbound: answer the waiting caller, then bridge them to the leg that answered. */
  'call.connect': { callId: string; attempt?: number; since?: string };
  /** Start recording an answered (outbound) or bridged (inbound) call that asked to be recorded. */
  'call.record': { callId: string; attempt?: number; since?: string };
  /** Fetch a recording's audio from the carrier's (expiring) address and store it. */
  'recording.fetch': { recordingId: string; url: string | null; attempt?: number; since?: string };
  /** Transcribe a completed call's recording once its audio is stored; `since`: when the call ended. */
  'recording.transcribe': { callId: string; attempt?: number; since?: string };
  /** `lane`: the named queue it was put in (delivery/deliver.ts decides), absent when it runs in parallel. */
  'delivery.attempt': { deliveryId: string; trigger: Exclude<AttemptTrigger, 'recover'>; lane?: string };
  /** Works through one recovery, a batch at a time (it re-enqueues itself until done). */
  'delivery.recover': { recoveryId: string };
  /** The scheduled reconciliation pass; it schedules its next run itself. */
  reconcile: Record<string, never>;
  /** One carrier lookup a handler asked for. */
  'reconcile.lookup': { target: LookupTarget };
  maintenance: Record<string, never>;
}

declare global {
  namespace GraphileWorker {
    interface Tasks extends Payloads {}
  }
}

/** Job keys: a second enqueue under the same key replaces the waiting job instead of adding one. */
export const jobKeys = {
  dispatch: (messageId: string) => `${DISPATCH_KEY_PREFIX}${messageId}`,
  dial: (legId: string) => `call.dial:${legId}`,
  connect: (callId: string) => `call.connect:${callId}`,
  /** One recording per call: the job key, and the command key the carrier de-duplicates record_start by. */
  record: (callId: string) => `record:${callId}`,
  fetchAudio: (recordingId: string) => `recording.fetch:${recordingId}`,
  transcribe: (callId: string) => `recording.transcribe:${callId}`,
  /** One hang-up (or reject) per carrier leg, whoever decided it; also its command key at the carrier. */
  command: (action: 'hangup' | 'reject', carrierRef: string) => `${action}:${carrierRef}`,
  /** A delivery's scheduled attempts (emit, retries). */
  delivery: (deliveryId: string) => `${DELIVERY_KEY_PREFIX}${deliveryId}`,
  /** A redelivery the customer asked for: a job of its own, so a scheduled retry is neither replaced nor hurried. */
  redelivery: (deliveryId: string) => `redeliver:${deliveryId}`,
  recovery: (recoveryId: string) => `delivery.recover:${recoveryId}`,
  lookup: (t: LookupTarget) =>
    `reconcile.lookup:${t.kind}:${t.kind === 'leg' ? t.legId : t.kind === 'message' ? t.messageId : t.callId}`,
  reconcile: 'reconcile',
  maintenance: 'maintenance',
} as const;

/** The prefix of a message's dispatch job key (the audit looks for a waiting message's job by it). */
export const DISPATCH_KEY_PREFIX = 'message.dispatch:';
/** The prefix of a delivery's job key (the audit looks for a pending delivery's job by it). */
export const DELIVERY_KEY_PREFIX = 'delivery:';

/** The tasks that run in delivery capacity of their own, apart from carrier events and commands. */
export const DELIVERY_TASKS = ['delivery.attempt', 'delivery.recover'] as const satisfies readonly TaskName[];

/** Named queues: the jobs in one run one at a time. */
export const lanes = {
  /** A failing endpoint's deliveries, one at a time, so a hanging endpoint holds one worker slot. */
  endpoint: (endpointId: string) => `endpoint:${endpointId}`,
  /** An account's attempts beyond its share of delivery capacity, one at a time, waiting for a slot. */
  account: (accountId: string) => `account:${accountId}`,
} as const;
