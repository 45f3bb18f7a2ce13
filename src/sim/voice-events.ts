// The Call Control webhooks of the simulated carrier (call.initiated, call.answered,
// call.hangup, call.bridged, call.recording.saved, call.recording.error) from the
// simulator's own leg facts, each payload with exactly the keys of captured Telnyx
// webhooks (the recording ones: Telnyx's documented payloads plus the keys its
// deliveries carry beside them, call_control_id, format and recording_id), and the
// SIP details Telnyx reports.

import { randomUUID } from 'node:crypto';
import { voiceTime, type TelnyxEvent } from './events.js';

export interface LegFacts {
  callControlId: string;
  callLegId: string;
  callSessionId: string;
  connectionId: string;
  direction: 'incoming' | 'outgoing';
  from: string;
  to: string;
  /** Base64, echoed exactly as the application last set it; null when never set. */
  clientState: string | null;
  tags: string[];
  /** Simulated epoch ms of call.initiated. */
  startTime: number;
}

export type HangupSource = 'caller' | 'callee' | 'unknown';

export interface Hangup {
  cause: string;
  source: HangupSource;
  sipCause: string;
  /** Simulated ms of the answer, null when the leg never answered (no call quality stats). */
  answeredAt: number | null;
}

/** SIP response codes Telnyx reports as sip_hangup_cause for each hangup_cause. */
export const SIP_HANGUP_CAUSE: Record<string, string> = {
  normal_clearing: '200',
  originator_cancel: '487',
  timeout: '487',
  time_limit: '200',
  user_busy: '486',
  call_rejected: '603',
  not_found: '404',
  no_answer: '480',
  unspecified: 'unspecified',
};

// The simulated PSTN side of a leg, and Telnyx's SIP edge (from the capture).
const PSTN_PEER = '198.51.100.23:5060';
const TELNYX_EDGE = '192.76.120.10:5060';

function sipUser(number: string): string {
  return number.startsWith('+1') ? number.slice(2) : number.replace(/^\+/, '');
}

function legIds(leg: LegFacts) {
  return {
    call_control_id: leg.callControlId,
    call_leg_id: leg.callLegId,
    call_session_id: leg.callSessionId,
    client_state: leg.clientState,
    connection_id: leg.connectionId,
    from: leg.from,
    to: leg.to,
  };
}

function qualityStats(answeredAt: number, endedAt: number) {
  // 20 ms packetisation: 50 packets a second each way.
  const packets = Math.max(0, Math.round(((endedAt - answeredAt) / 1000) * 50));
  return {
    inbound: {
      jitter_max_variance: '0.00',
      jitter_packet_count: '0',
      mos: '4.50',
      packet_count: String(packets),
      skip_packet_count: '0',
    },
    outbound: { packet_count: String(packets), skip_packet_count: '0' },
  };
}

/** What a recording's webhooks tell: the leg's ids come from LegFacts, these from the recording. */
export interface RecordingFacts {
  recordingId: string;
  /** The record_start's client_state (base64 as given), else the leg's at record_start; null when neither. */
  clientState: string | null;
  format: 'wav' | 'mp3';
  channels: 'single' | 'dual';
  /** Simulated epoch ms. */
  startedAt: number;
  endedAt: number;
  /** The signed download URL of the file in `format`. */
  url: string;
}

export const callEvents = {
  /** C1 (incoming, parked) or C4 (outgoing, bridging). */
  callInitiated(leg: LegFacts, at: number, id: string = randomUUID()): TelnyxEvent {
    const payload =
      leg.direction === 'incoming'
        ? {
            ...legIds(leg),
            caller_id_name: leg.from,
            calling_party_type: 'pstn',
            connection_codecs: 'PCMA,PCMU,VP8,H264',
            direction: 'incoming',
            from_sip_uri: `${sipUser(leg.from)}@${PSTN_PEER}`,
            offered_codecs: 'PCMU,G729',
            start_time: voiceTime(leg.startTime),
            state: 'parked',
            to_sip_uri: `${leg.to}@${TELNYX_EDGE}`,
          }
        : { ...legIds(leg), direction: 'outgoing', state: 'bridging', tags: leg.tags };
    return { id, eventType: 'call.initiated', occurredAt: voiceTime(at), payload };
  },

  /** C2. */
  callAnswered(leg: LegFacts, at: number, id: string = randomUUID()): TelnyxEvent {
    return {
      id,
      eventType: 'call.answered',
      occurredAt: voiceTime(at),
      payload: {
        ...legIds(leg),
        calling_party_type: 'pstn',
        codec: 'PCMU',
        sampling_rate: 8000,
        start_time: voiceTime(leg.startTime),
      },
    };
  },

  /** C3, with end_time as real deliveries carry it. */
  callHangup(leg: LegFacts, hangup: Hangup, at: number, id: string = randomUUID()): TelnyxEvent {
    return {
      id,
      eventType: 'call.hangup',
      occurredAt: voiceTime(at),
      payload: {
        ...legIds(leg),
        call_quality_stats: hangup.answeredAt === null ? null : qualityStats(hangup.answeredAt, at),
        calling_party_type: 'pstn',
        end_time: voiceTime(at),
        hangup_cause: hangup.cause,
        hangup_source: hangup.source,
        sip_hangup_cause: hangup.sipCause,
        start_time: voiceTime(leg.startTime),
      },
    };
  },

  /** C5. */
  callBridged(leg: LegFacts, at: number, id: string = randomUUID()): TelnyxEvent {
    return { id, eventType: 'call.bridged', occurredAt: voiceTime(at), payload: legIds(leg) };
  },

  /** The recording's file is ready: its URLs expire 10 minutes after this was sent. */
  callRecordingSaved(leg: LegFacts, r: RecordingFacts, at: number, id: string = randomUUID()): TelnyxEvent {
    return {
      id,
      eventType: 'call.recording.saved',
      occurredAt: voiceTime(at),
      payload: {
        call_control_id: leg.callControlId,
        call_leg_id: leg.callLegId,
        call_session_id: leg.callSessionId,
        channels: r.channels,
        client_state: r.clientState,
        connection_id: leg.connectionId,
        format: r.format,
        public_recording_urls: { [r.format]: r.url },
        recording_ended_at: voiceTime(r.endedAt),
        recording_id: r.recordingId,
        recording_started_at: voiceTime(r.startedAt),
        recording_urls: { [r.format]: r.url },
      },
    };
  },

  /** The recording could not be saved: Telnyx's payload has the leg's ids, client_state and a reason, no recording id. */
  callRecordingError(
    leg: LegFacts,
    clientState: string | null,
    reason: string,
    at: number,
    id: string = randomUUID(),
  ): TelnyxEvent {
    return {
      id,
      eventType: 'call.recording.error',
      occurredAt: voiceTime(at),
      payload: {
        call_control_id: leg.callControlId,
        call_leg_id: leg.callLegId,
        call_session_id: leg.callSessionId,
        client_state: clientState,
        connection_id: leg.connectionId,
        reason,
      },
    };
  },
};
