// Simulated Telnyx Call Control: one state machine per call leg, driven by the
// callee's persona, by our Call Control commands (dial, answer, hangup, reject,
// bridge) and by the control API (the far end answers or hangs up, a phone calls
// in). Every transition emits its webhook, echoing the leg's client_state.
//
//   outgoing (dial):   ringing ──answer──▶ answered ──hangup──▶ ended
//                         └──────── timeout / busy / rejected / cancel ──▶ ended
//   incoming:          parked  ──answer──▶ answered ──hangup──▶ ended
//                         └──────── reject / hangup / caller gives up ──▶ ended
//
// Bridging marks two live legs as connected (call.bridged for each); hanging up
// one leg of a bridge leaves the other up: the application hangs it up.
//
// record_start (an answered leg only: 90034 otherwise; format and channels are
// required, as Telnyx's API marks them) starts a recording, record_stop
// ({recording_id?}: that one, else every one running) or the hangup ends it;
// recordings.ts tells of it after the hangup. A client_state on either sets the
// leg's, as on every command, and is the one the recording's webhook echoes.
//
// GET /v2/calls/{call_control_id} ("Retrieve a call status") answers from the
// leg's own state, so it tells the truth even when the webhooks were lost:
//   {"data":{"call_control_id","call_leg_id","call_session_id","client_state",
//            "is_alive","start_time","end_time","call_duration","record_type":"call"}}
// is_alive is true until the leg ended (ringing and parked legs included);
// start_time and end_time are the exact voice timestamps its webhooks carried
// (call.initiated's start_time, call.hangup's end_time), and end_time is absent
// while the leg is alive (Telnyx documents it as present only once the call is
// not alive). call_duration is the whole seconds the leg was connected, from
// its answer to its end (to now while it is up), rounded up; 0 for a leg never
// answered. Rounded up, so a client that lost call.answered can bill from the
// lookup alone: ceil(call_duration / 60) is the same number of minutes as the
// exact answer-to-end time gives, and end_time − call_duration is the answer
// to within a second (never after it). Telnyx keeps the status 10 minutes after
// the call ended, counted in wall-clock time as its command window and webhook
// retries are (a run at a fast time scale must not forget a call inside its own
// outages); after that, and for
// an id it never issued, it answers 422 90015 "Invalid Call Control ID", as an
// action on an unknown leg does.
// command_id de-duplication follows Telnyx: the same command_id for the same
// call_control_id (for dial: the same command_id) within 60 s of wall-clock time is
// ignored and answered as the first one was.

import { randomUUID } from 'node:crypto';
import type { Account } from './account.js';
import { newCallControlId, voiceMicros, voiceTime, type TelnyxEvent } from './events.js';
import { callEvents, SIP_HANGUP_CAUSE, type HangupSource, type LegFacts } from './voice-events.js';
import {
  isBlank,
  isBody,
  isE164,
  isRefusal,
  optionalClientState,
  optionalString,
  optionalUrl,
  SimInputError,
  type Body,
} from './fields.js';
import type { CallPlan, RecordingOutcome } from './personas.js';
import type { RecordingChannels, RecordingFormat, Recordings } from './recordings.js';
import { refuse, type Outcome, type Refusal } from './refusals.js';
import type { Timer } from './scheduler.js';
import type { DeliveryPolicy } from './webhooks.js';

export const COMMAND_WINDOW_MS = 60_000;
/**
 * How long after a leg ended its status can still be retrieved, in wall-clock ms
 * like the command window: it is the carrier's API remembering, not the call's
 * timeline, so compressing simulated time does not make the carrier forget a call
 * sooner than a receiver's outage lasts (at timeScale 0.05 a 10-minute retention
 * in the leg's time was 30 s, shorter than the outages the chaos run makes).
 */
export const STATUS_RETENTION_MS = 600_000;
const DEFAULT_TIMEOUT_SECS = 30;
const SIP_URI = /^sips?:[^@\s]+@[^@\s]+$/;

export type LegState = 'ringing' | 'parked' | 'answered' | 'ended';
export type CallAction = 'answer' | 'hangup' | 'bridge' | 'reject' | 'record_start' | 'record_stop';
export const CALL_ACTIONS: readonly CallAction[] = [
  'answer',
  'hangup',
  'bridge',
  'reject',
  'record_start',
  'record_stop',
];

/** The hangup causes Telnyx reports (call.hangup payload.hangup_cause). */
export const HANGUP_CAUSES = [
  'call_rejected',
  'normal_clearing',
  'originator_cancel',
  'timeout',
  'time_limit',
  'user_busy',
  'not_found',
  'no_answer',
  'unspecified',
] as const;

interface Leg extends LegFacts {
  /** The simulated timeline of the leg's session (scheduler.timeline(); shared through link_to). */
  clock: () => number;
  /** The simulated time of the leg's latest event: its stamps never go backwards. */
  lastAt: number;
  state: LegState;
  answeredAt: number | null;
  /** The simulated time of call.hangup (its end_time); null while the leg is alive. */
  endedAt: number | null;
  /** The leg's own webhook URL (dial or answer webhook_url); else the connection's. */
  webhookUrl: string | null;
  timeoutSecs: number;
  linkTo: string | null;
  bridgeOnAnswer: boolean;
  bridgedWith: string | null;
  plan: CallPlan;
  /** What the far end's persona (callee of an outgoing leg, caller of an incoming one) does to its webhooks. */
  policy: DeliveryPolicy;
  /** What becomes of its recordings, from the same persona. */
  recordingOutcome: RecordingOutcome;
  timers: Timer[];
}

export interface DialData {
  call_control_id: string;
  call_leg_id: string;
  call_session_id: string;
  client_state: string | null;
  is_alive: false;
  record_type: 'call';
}

/** GET /v2/calls/{call_control_id}: Telnyx's call status. */
export interface CallStatus {
  call_control_id: string;
  call_leg_id: string;
  call_session_id: string;
  client_state: string | null;
  is_alive: boolean;
  start_time: string;
  /** Only once the leg is no longer alive. */
  end_time?: string;
  call_duration: number;
  record_type: 'call';
}

export interface LiveLeg {
  call_control_id: string;
  call_leg_id: string;
  call_session_id: string;
  direction: 'incoming' | 'outgoing';
  from: string;
  to: string;
  state: LegState;
  bridged_with: string | null;
}

export interface InboundCall {
  from: string;
  to: string;
  /** Defaults to the account's connection. */
  connection_id?: string;
  /** Where this leg's webhooks go instead of the connection's URL. */
  webhook_url?: string;
}

export interface InboundCallResult {
  callControlId: string;
  callLegId: string;
  callSessionId: string;
  eventId: string;
}

/** Remembers accepted commands by key for a window of wall-clock time. */
class CommandLog<T> {
  private seen = new Map<string, { at: number; value: T }>();

  constructor(
    private readonly windowMs: number,
    private readonly now: () => number,
  ) {}

  get(key: string): T | undefined {
    const entry = this.seen.get(key);
    if (!entry) return undefined;
    if (this.now() - entry.at > this.windowMs) {
      this.seen.delete(key);
      return undefined;
    }
    return entry.value;
  }

  remember(key: string, value: T): void {
    const now = this.now();
    if (this.seen.size > 10_000) {
      for (const [k, e] of this.seen) if (now - e.at > this.windowMs) this.seen.delete(k);
    }
    this.seen.set(key, { at: now, value });
  }

  clear(): void {
    this.seen.clear();
  }
}

export class CallControl {
  private legs = new Map<string, Leg>();
  private readonly commands: CommandLog<DialData | { result: 'ok' }>;

  constructor(
    private readonly account: Account,
    private readonly recordings: Recordings,
  ) {
    this.commands = new CommandLog(COMMAND_WINDOW_MS, () => account.scheduler.wallNow());
  }

  get count(): number {
    return this.legs.size;
  }

  live(): LiveLeg[] {
    return [...this.legs.values()]
      .filter((l) => l.state !== 'ended')
      .map((l) => ({
        call_control_id: l.callControlId,
        call_leg_id: l.callLegId,
        call_session_id: l.callSessionId,
        direction: l.direction,
        from: l.from,
        to: l.to,
        state: l.state,
        bridged_with: l.bridgedWith,
      }));
  }

  /** POST /v2/calls. `reject` is the behaviour's decision to refuse this dial. */
  dial(input: unknown, opts: { reject: boolean }): Outcome<DialData> {
    // A repeat is ignored before anything else is looked at: the first one was valid,
    // even if, say, its link_to leg has ended since.
    const commandId = isBody(input) && typeof input['command_id'] === 'string' ? input['command_id'] : null;
    const key = commandId === null ? null : `dial|${commandId}`;
    const previous = key === null ? undefined : this.commands.get(key);
    if (previous) return { ok: true, data: previous as DialData, deduplicated: true };
    const req = this.readDial(input);
    if (isRefusal(req)) return req;
    if (opts.reject) return refuse.dialRefused();

    const linked = req.linkTo === null ? undefined : this.legs.get(req.linkTo);
    const callee = this.account.personas.lookup(req.to);
    const clock = linked?.clock ?? this.account.scheduler.timeline();
    const startTime = clock();
    const leg: Leg = {
      clock,
      lastAt: startTime,
      callControlId: newCallControlId(),
      callLegId: randomUUID(),
      // Telnyx: link_to shares the linked call's session.
      callSessionId: linked?.callSessionId ?? randomUUID(),
      connectionId: req.connectionId,
      direction: 'outgoing',
      from: req.from,
      to: req.to,
      clientState: req.clientState,
      tags: [],
      startTime,
      state: 'ringing',
      answeredAt: null,
      endedAt: null,
      webhookUrl: req.webhookUrl,
      timeoutSecs: req.timeoutSecs,
      linkTo: req.linkTo,
      bridgeOnAnswer: req.bridgeOnAnswer,
      bridgedWith: null,
      plan: callee.call,
      policy: callee.delivery,
      recordingOutcome: callee.recording,
      timers: [],
    };
    this.legs.set(leg.callControlId, leg);
    const data: DialData = {
      call_control_id: leg.callControlId,
      call_leg_id: leg.callLegId,
      call_session_id: leg.callSessionId,
      client_state: leg.clientState,
      is_alive: false,
      record_type: 'call',
    };
    if (key !== null) this.commands.remember(key, data);
    this.emit(leg, callEvents.callInitiated(leg, leg.startTime));
    this.ring(leg);
    return { ok: true, data };
  }

  /** POST /v2/calls/{call_control_id}/actions/{action}. */
  action(callControlId: string, action: string, input: unknown): Outcome<{ result: 'ok' }> {
    if (!(CALL_ACTIONS as readonly string[]).includes(action)) {
      return refuse.badRequest(
        `The simulator does not implement actions/${action} (it does ${CALL_ACTIONS.join(', ')}).`,
      );
    }
    if (input !== undefined && !isBody(input)) return refuse.malformedBody('The request body must be a JSON object.');
    const body: Body = input ?? {};
    const leg = this.legs.get(callControlId);
    if (!leg) return refuse.invalidCallControlId();
    const clientState = optionalClientState(body);
    if (isRefusal(clientState)) return clientState;
    const commandId = optionalString(body, 'command_id');
    if (isRefusal(commandId)) return commandId;
    const key = commandId === null ? null : `${callControlId}|${commandId}`;
    if (key !== null && this.commands.get(key)) return { ok: true, data: { result: 'ok' }, deduplicated: true };
    if (leg.state === 'ended') return refuse.callEnded();

    const refusal = this.apply(leg, action as CallAction, body, clientState);
    if (refusal) return refusal;
    if (key !== null) this.commands.remember(key, { result: 'ok' });
    return { ok: true, data: { result: 'ok' } };
  }

  /** GET /v2/calls/{call_control_id}: what the carrier knows of the leg now. */
  status(callControlId: string): Outcome<CallStatus> {
    const leg = this.legs.get(callControlId);
    if (!leg) return refuse.invalidCallControlId();
    const now = Math.max(leg.clock(), leg.lastAt);
    const endedForMs = leg.endedAt === null ? 0 : (now - leg.endedAt) * this.account.scheduler.timeScale;
    if (endedForMs > STATUS_RETENTION_MS) return refuse.invalidCallControlId();
    const until = leg.endedAt ?? now;
    const connectedMicros = leg.answeredAt === null ? 0 : voiceMicros(until) - voiceMicros(leg.answeredAt);
    return {
      ok: true,
      data: {
        call_control_id: leg.callControlId,
        call_leg_id: leg.callLegId,
        call_session_id: leg.callSessionId,
        client_state: leg.clientState,
        is_alive: leg.endedAt === null,
        start_time: voiceTime(leg.startTime),
        ...(leg.endedAt === null ? {} : { end_time: voiceTime(leg.endedAt) }),
        call_duration: Math.ceil(Math.max(0, connectedMicros) / 1_000_000),
        record_type: 'call',
      },
    };
  }

  /** A phone calls one of the account's numbers: call.initiated, incoming, parked (fixture C1). */
  inbound(input: InboundCall): InboundCallResult {
    if (!isE164(input.from)) throw new SimInputError('from must be an E.164 number');
    if (!isE164(input.to)) throw new SimInputError('to must be an E.164 number');
    const clock = this.account.scheduler.timeline();
    const now = clock();
    const caller = this.account.personas.lookup(input.from);
    const leg: Leg = {
      clock,
      lastAt: now,
      callControlId: newCallControlId(),
      callLegId: randomUUID(),
      callSessionId: randomUUID(),
      connectionId: input.connection_id ?? this.account.connectionId,
      direction: 'incoming',
      from: input.from,
      to: input.to,
      clientState: null,
      tags: [],
      startTime: now,
      state: 'parked',
      answeredAt: null,
      endedAt: null,
      webhookUrl: input.webhook_url ?? null,
      timeoutSecs: DEFAULT_TIMEOUT_SECS,
      linkTo: null,
      bridgeOnAnswer: false,
      bridgedWith: null,
      plan: { kind: 'manual' },
      policy: caller.delivery,
      recordingOutcome: caller.recording,
      timers: [],
    };
    this.legs.set(leg.callControlId, leg);
    const event = callEvents.callInitiated(leg, now);
    this.emit(leg, event);
    return {
      callControlId: leg.callControlId,
      callLegId: leg.callLegId,
      callSessionId: leg.callSessionId,
      eventId: event.id,
    };
  }

  /** The callee picks up an outgoing leg that is still ringing. */
  farEndAnswer(callControlId: string): void {
    const leg = this.liveLeg(callControlId);
    if (leg.direction !== 'outgoing' || leg.state !== 'ringing') {
      throw new SimInputError(
        `only a ringing outgoing leg can be answered by the far end (this one is ${leg.direction}, ${leg.state})`,
      );
    }
    this.cancelTimers(leg);
    this.answer(leg);
    this.talk(leg);
  }

  /** The far end hangs up: the callee of an outgoing leg, the caller of an incoming one. */
  farEndHangup(callControlId: string, cause?: string): void {
    const leg = this.liveLeg(callControlId);
    if (cause !== undefined && !(HANGUP_CAUSES as readonly string[]).includes(cause)) {
      throw new SimInputError(`cause must be one of ${HANGUP_CAUSES.join(', ')}`);
    }
    const answered = leg.state === 'answered';
    const fallback = answered
      ? 'normal_clearing'
      : leg.direction === 'outgoing'
        ? 'call_rejected'
        : 'originator_cancel';
    this.end(leg, cause ?? fallback, leg.direction === 'outgoing' ? 'callee' : 'caller');
  }

  reset(): void {
    this.legs.clear();
    this.commands.clear();
  }

  private liveLeg(callControlId: string): Leg {
    const leg = this.legs.get(callControlId);
    if (!leg) throw new SimInputError(`no call leg ${callControlId}`);
    if (leg.state === 'ended') throw new SimInputError(`call leg ${callControlId} has already ended`);
    return leg;
  }

  private apply(leg: Leg, action: CallAction, body: Body, clientState: string | null): Refusal | null {
    switch (action) {
      case 'answer': {
        if (leg.direction !== 'incoming') return refuse.badRequest('Only an incoming call can be answered.');
        if (leg.state === 'answered') return refuse.badRequest('The call has already been answered.');
        const webhookUrl = optionalUrl(body, 'webhook_url');
        if (isRefusal(webhookUrl)) return webhookUrl;
        if (webhookUrl !== null) leg.webhookUrl = webhookUrl;
        if (clientState !== null) leg.clientState = clientState;
        this.answer(leg);
        return null;
      }
      case 'hangup': {
        if (clientState !== null) leg.clientState = clientState;
        const cause = leg.direction === 'outgoing' && leg.state === 'ringing' ? 'originator_cancel' : 'normal_clearing';
        // The application is the caller of an outgoing leg and the callee of an incoming one.
        this.end(leg, cause, leg.direction === 'outgoing' ? 'caller' : 'callee');
        return null;
      }
      case 'reject': {
        if (leg.direction !== 'incoming' || leg.state !== 'parked') {
          return refuse.badRequest('Only an incoming call that has not been answered can be rejected.');
        }
        const cause = body['cause'] ?? 'CALL_REJECTED';
        if (cause !== 'CALL_REJECTED' && cause !== 'USER_BUSY') {
          return refuse.badParameter('cause', "'cause' must be CALL_REJECTED or USER_BUSY.");
        }
        if (clientState !== null) leg.clientState = clientState;
        this.end(leg, cause === 'USER_BUSY' ? 'user_busy' : 'call_rejected', 'callee');
        return null;
      }
      case 'bridge': {
        const otherId = body['call_control_id'];
        if (isBlank(otherId) || typeof otherId !== 'string') return refuse.missing('call_control_id');
        const other = this.legs.get(otherId);
        if (!other) return refuse.invalidCallControlId();
        if (other === leg) return refuse.badParameter('call_control_id', 'A call can not be bridged with itself.');
        if (other.state === 'ended') return refuse.callEnded();
        if (leg.state === 'ringing' || other.state === 'ringing') return refuse.notAnswered();
        if (clientState !== null) leg.clientState = clientState;
        this.bridge(leg, other);
        return null;
      }
      case 'record_start': {
        if (leg.state !== 'answered') return refuse.notAnswered();
        const format = oneOf<RecordingFormat>(body, 'format', ['wav', 'mp3']);
        if (isRefusal(format)) return format;
        const channels = oneOf<RecordingChannels>(body, 'channels', ['single', 'dual']);
        if (isRefusal(channels)) return channels;
        if (clientState !== null) leg.clientState = clientState;
        this.recordings.start(leg, { format, channels, clientState: leg.clientState, at: this.now(leg) });
        return null;
      }
      case 'record_stop': {
        if (leg.state !== 'answered') return refuse.notAnswered();
        const recordingId = optionalString(body, 'recording_id');
        if (isRefusal(recordingId)) return recordingId;
        if (!this.recordings.isRecording(leg, recordingId)) {
          return refuse.badRequest(
            recordingId === null
              ? 'The call is not being recorded.'
              : 'No recording with this recording_id is running.',
          );
        }
        if (clientState !== null) leg.clientState = clientState;
        this.recordings.stop(leg, recordingId, clientState, this.now(leg));
        return null;
      }
    }
  }

  private readDial(input: unknown) {
    if (!isBody(input)) return refuse.malformedBody('The request body must be a JSON object.');
    const body: Body = input;
    const connectionId = body['connection_id'];
    if (isBlank(connectionId)) return refuse.missing('connection_id');
    if (typeof connectionId !== 'string' || !this.account.acceptsConnection(connectionId)) {
      return refuse.badParameter('connection_id', 'Invalid connection_id: no Call Control App with this id.');
    }
    let to = body['to'];
    if (Array.isArray(to)) {
      if (to.length !== 1) return refuse.badParameter('to', 'The simulator dials one destination per request.');
      to = to[0];
    }
    if (isBlank(to)) return refuse.missing('to');
    if (!isE164(to) && !(typeof to === 'string' && SIP_URI.test(to))) return refuse.notE164('to');
    if (isBlank(body['from'])) return refuse.missing('from');
    if (!isE164(body['from'])) return refuse.notE164('from');
    const timeout = body['timeout_secs'] ?? DEFAULT_TIMEOUT_SECS;
    if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 5 || timeout > 600) {
      return refuse.badParameter('timeout_secs', "'timeout_secs' must be an integer between 5 and 600.");
    }
    const timeLimit = body['time_limit_secs'];
    const badLimit =
      typeof timeLimit !== 'number' || !Number.isInteger(timeLimit) || timeLimit < 30 || timeLimit > 14_400;
    if (timeLimit !== undefined && badLimit) {
      return refuse.badParameter('time_limit_secs', "'time_limit_secs' must be an integer between 30 and 14400.");
    }
    const clientState = optionalClientState(body);
    if (isRefusal(clientState)) return clientState;
    const commandId = optionalString(body, 'command_id');
    if (isRefusal(commandId)) return commandId;
    const webhookUrl = optionalUrl(body, 'webhook_url');
    if (isRefusal(webhookUrl)) return webhookUrl;
    const linkTo = optionalString(body, 'link_to');
    if (isRefusal(linkTo)) return linkTo;
    const bridgeOnAnswer = body['bridge_on_answer'] ?? false;
    if (typeof bridgeOnAnswer !== 'boolean') {
      return refuse.badParameter('bridge_on_answer', "'bridge_on_answer' must be a boolean.");
    }
    if (bridgeOnAnswer && linkTo === null) return refuse.missing('link_to');
    if (linkTo !== null) {
      const linked = this.legs.get(linkTo);
      if (!linked) return refuse.invalidCallControlId();
      if (linked.state === 'ended') return refuse.callEnded();
    }
    return {
      connectionId,
      to: to as string,
      from: body['from'],
      timeoutSecs: timeout,
      clientState,
      webhookUrl,
      linkTo,
      bridgeOnAnswer,
    };
  }

  /** The callee's persona decides what happens to a ringing outgoing leg. */
  private ring(leg: Leg): void {
    const timeoutMs = leg.timeoutSecs * 1000;
    const timeout = (at: number) => this.end(leg, 'timeout', 'caller', at);
    const plan = leg.plan;
    switch (plan.kind) {
      case 'manual':
        return;
      case 'never_answers':
        this.timer(leg, timeoutMs, timeout);
        return;
      case 'refuses':
        if (plan.afterMs >= timeoutMs) this.timer(leg, timeoutMs, timeout);
        else this.timer(leg, plan.afterMs, (at) => this.end(leg, plan.hangupCause, 'callee', at));
        return;
      case 'answers':
        if (plan.answerAfterMs >= timeoutMs) this.timer(leg, timeoutMs, timeout);
        else
          this.timer(leg, plan.answerAfterMs, (at) => {
            this.answer(leg, at);
            this.talk(leg);
          });
    }
  }

  /** After an answer, the callee hangs up when the persona's talk time is over. */
  private talk(leg: Leg): void {
    const plan = leg.plan;
    if (plan.kind === 'answers' && plan.talkMs !== null) {
      this.timer(leg, plan.talkMs, (at) => this.end(leg, 'normal_clearing', 'callee', at));
    }
  }

  private answer(leg: Leg, at?: number): void {
    const now = this.stamp(leg, at);
    leg.state = 'answered';
    leg.answeredAt = now;
    this.emit(leg, callEvents.callAnswered(leg, now));
    if (leg.bridgeOnAnswer && leg.linkTo !== null) {
      const linked = this.legs.get(leg.linkTo);
      if (linked && linked.state !== 'ended') this.bridge(leg, linked, now);
    }
  }

  private bridge(a: Leg, b: Leg, at?: number): void {
    for (const leg of [a, b]) {
      const previous = leg.bridgedWith === null ? undefined : this.legs.get(leg.bridgedWith);
      if (previous && previous !== a && previous !== b) previous.bridgedWith = null;
    }
    a.bridgedWith = b.callControlId;
    b.bridgedWith = a.callControlId;
    this.emit(a, callEvents.callBridged(a, this.stamp(a, at)));
    this.emit(b, callEvents.callBridged(b, this.stamp(b, at)));
  }

  private end(leg: Leg, cause: string, source: HangupSource, at?: number): void {
    if (leg.state === 'ended') return;
    this.cancelTimers(leg);
    leg.state = 'ended';
    if (leg.bridgedWith !== null) {
      const partner = this.legs.get(leg.bridgedWith);
      if (partner && partner.bridgedWith === leg.callControlId) partner.bridgedWith = null;
      leg.bridgedWith = null;
    }
    const now = this.stamp(leg, at);
    leg.endedAt = now;
    const hangup = { cause, source, sipCause: SIP_HANGUP_CAUSE[cause] ?? 'unspecified', answeredAt: leg.answeredAt };
    this.emit(leg, callEvents.callHangup(leg, hangup, now));
    this.recordings.legEnded(leg, now);
  }

  /** The leg's timeline now, never before its last event (a command's moment, not an event's stamp). */
  private now(leg: Leg): number {
    return Math.max(leg.clock(), leg.lastAt);
  }

  /**
   * Runs fn `simulatedMs` after the leg's latest event, stamped exactly then: a
   * persona's 5 s talk is a 5 s call whatever the timers' real jitter.
   */
  private timer(leg: Leg, simulatedMs: number, fn: (at: number) => void): void {
    const due = leg.lastAt + simulatedMs;
    leg.timers.push(this.account.scheduler.after(simulatedMs, () => fn(due)));
  }

  /** The time of a leg's next event: `at` when planned, else its timeline now; never before its last one. */
  private stamp(leg: Leg, at?: number): number {
    leg.lastAt = Math.max(at ?? leg.clock(), leg.lastAt);
    return leg.lastAt;
  }

  private cancelTimers(leg: Leg): void {
    for (const t of leg.timers) t.cancel();
    leg.timers = [];
  }

  private emit(leg: Leg, event: TelnyxEvent): void {
    const urls = [leg.webhookUrl ?? this.account.webhookUrl()];
    void this.account.sender.emit(event, urls, { lane: leg.callControlId, policy: leg.policy });
  }
}

/** A required parameter that must be one of a few words. */
function oneOf<T extends string>(body: Body, param: string, values: readonly T[]): T | Refusal {
  const v = body[param];
  if (isBlank(v)) return refuse.missing(param);
  if (typeof v !== 'string' || !(values as readonly string[]).includes(v)) {
    return refuse.badParameter(param, `'${param}' must be one of ${values.join(', ')}.`);
  }
  return v as T;
}
