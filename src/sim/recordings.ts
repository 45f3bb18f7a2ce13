// The simulated carrier's call recordings: what record_start and record_stop do
// to a leg, the webhook that tells of a finished recording, the recording
// resource (GET /v2/recordings/{id}) and the signed, expiring URLs its file is
// downloaded from, served by the simulator itself like Telnyx's S3 links.
//
// A recording runs from record_start until record_stop or the leg's hangup (the
// usual end). Telnyx starts a new recording for every record_start it accepts, so
// a second one on a leg already recording is a second recording; only a repeated
// command_id (calls.ts) starts nothing. RECORDING_SAVED_AFTER_MS (simulated) after
// it ended, call.recording.saved goes out through the leg's webhook lane, so it
// arrives after the leg's call.hangup, and through the usual sender, so the
// duplicate, re-send, reorder, drop and hold knobs apply to it as to every webhook.
// A leg whose far end has the persona `recording: "error"` gets
// call.recording.error instead.
//
// The URLs, in recording_urls and public_recording_urls, are
//   {base}/_sim/recordings/{recording_id}.{wav|mp3}?expires={simulated epoch ms}&signature={hex HMAC-SHA256}
// valid for RECORDING_URL_TTL_MS (10 simulated minutes, on the leg's timeline, so
// timeScale compresses it like every carrier delay) after the webhook was sent;
// GET /v2/recordings/{id} hands out a fresh one. An expired or tampered URL is 403
// with an S3-style XML error. The file is a real WAV (audio.ts) as long as the
// recording; an mp3 recording is served the same WAV bytes, labelled audio/wav:
// the simulator writes no MP3 encoder, and a client that trusts the
// content-type rather than the extension reads it right.

import { createHmac, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { Account } from './account.js';
import { toneWav } from './audio.js';
import type { TelnyxEvent } from './events.js';
import type { RecordingOutcome } from './personas.js';
import { refuse, type Outcome } from './refusals.js';
import { callEvents, type LegFacts } from './voice-events.js';
import type { DeliveryPolicy } from './webhooks.js';

/** How long a recording URL stays valid after it was handed out (simulated ms). */
export const RECORDING_URL_TTL_MS = 600_000;
/** From a recording's end to its call.recording.saved (simulated ms): the file is uploaded first. */
export const RECORDING_SAVED_AFTER_MS = 1000;
const ERROR_REASON = 'Internal server error';

export type RecordingFormat = 'wav' | 'mp3';
export type RecordingChannels = 'single' | 'dual';

/** The leg a recording belongs to, as calls.ts keeps it. */
export interface RecordedLeg extends LegFacts {
  clock: () => number;
  webhookUrl: string | null;
  policy: DeliveryPolicy;
  recordingOutcome: RecordingOutcome;
}

interface Recording {
  id: string;
  leg: RecordedLeg;
  format: RecordingFormat;
  channels: RecordingChannels;
  clientState: string | null;
  startedAt: number;
  endedAt: number | null;
  /** When its call.recording.saved went out (simulated ms); null before, and for a failed one. */
  savedAt: number | null;
}

/** A recording whose call.recording.saved went out: what GET /v2/recordings shows. */
type SavedRecording = Recording & { savedAt: number; endedAt: number };
const isSaved = (r: Recording): r is SavedRecording => r.savedAt !== null && r.endedAt !== null;

export interface RecordingCounts {
  /** record_start commands that started a recording (a repeated command_id starts none). */
  recordingsStarted: number;
  /** call.recording.saved events told (dropped ones included, copies not). */
  recordingsSaved: number;
  /** call.recording.error events told. */
  recordingErrors: number;
  /** Recording files served (200 answers to a signed URL). */
  recordingDownloads: number;
}

/** GET /v2/recordings/{id}: Telnyx's recording resource. */
export interface RecordingResource {
  call_control_id: string;
  call_leg_id: string;
  call_session_id: string;
  channels: RecordingChannels;
  connection_id: string;
  created_at: string;
  download_urls: Partial<Record<RecordingFormat, string>>;
  duration_millis: number;
  id: string;
  record_type: 'recording';
  recording_started_at: string;
  recording_ended_at: string;
  source: 'call';
  status: 'completed';
  updated_at: string;
}

export interface RecordingFile {
  status: number;
  contentType: string;
  body: Buffer | string;
}

function emptyCounts(): RecordingCounts {
  return { recordingsStarted: 0, recordingsSaved: 0, recordingErrors: 0, recordingDownloads: 0 };
}

export class Recordings {
  counts = emptyCounts();
  private byId = new Map<string, Recording>();
  /** The recordings running on each leg, by call_control_id. */
  private running = new Map<string, Recording[]>();
  /** Signs the URLs; new per simulator, so a URL from another run is refused like a forged one. */
  private readonly secret = randomBytes(32);

  constructor(
    private readonly account: Account,
    /** The simulator's own base URL (known once it listens). */
    private readonly base: () => string,
  ) {}

  start(
    leg: RecordedLeg,
    r: { format: RecordingFormat; channels: RecordingChannels; clientState: string | null; at: number },
  ): string {
    const rec: Recording = {
      id: randomUUID(),
      leg,
      format: r.format,
      channels: r.channels,
      clientState: r.clientState,
      startedAt: r.at,
      endedAt: null,
      savedAt: null,
    };
    this.byId.set(rec.id, rec);
    this.running.set(leg.callControlId, [...(this.running.get(leg.callControlId) ?? []), rec]);
    this.counts.recordingsStarted++;
    return rec.id;
  }

  /** Whether record_stop has something to stop: the recording named, or any on the leg. */
  isRecording(leg: RecordedLeg, recordingId: string | null): boolean {
    const running = this.running.get(leg.callControlId) ?? [];
    return running.some((r) => recordingId === null || r.id === recordingId);
  }

  /** record_stop: the recording named, or every one running on the leg; a client_state given replaces theirs. */
  stop(leg: RecordedLeg, recordingId: string | null, clientState: string | null, at: number): void {
    for (const rec of [...(this.running.get(leg.callControlId) ?? [])]) {
      if (recordingId !== null && rec.id !== recordingId) continue;
      if (clientState !== null) rec.clientState = clientState;
      this.finish(rec, at);
    }
  }

  /** The leg hung up: everything it was recording ends with it. */
  legEnded(leg: RecordedLeg, at: number): void {
    for (const rec of [...(this.running.get(leg.callControlId) ?? [])]) this.finish(rec, at);
  }

  /** GET /v2/recordings/{id}, with a fresh download URL; a recording not yet saved is not there yet. */
  resource(id: string): Outcome<RecordingResource> {
    const rec = this.byId.get(id);
    if (!rec || !isSaved(rec)) return refuse.notFound(`/v2/recordings/${id}`);
    return { ok: true, data: this.toResource(rec) };
  }

  private toResource(rec: SavedRecording): RecordingResource {
    const savedAt = new Date(Math.floor(rec.savedAt)).toISOString();
    return {
      call_control_id: rec.leg.callControlId,
      call_leg_id: rec.leg.callLegId,
      call_session_id: rec.leg.callSessionId,
      channels: rec.channels,
      connection_id: rec.leg.connectionId,
      created_at: savedAt,
      download_urls: { [rec.format]: this.url(rec, rec.leg.clock() + RECORDING_URL_TTL_MS) },
      duration_millis: durationMs(rec),
      id: rec.id,
      record_type: 'recording',
      recording_started_at: new Date(Math.floor(rec.startedAt)).toISOString(),
      recording_ended_at: new Date(Math.floor(rec.endedAt)).toISOString(),
      source: 'call',
      status: 'completed',
      updated_at: savedAt,
    };
  }

  /**
   * GET /v2/recordings: the saved recordings, oldest first, narrowed by Telnyx's
   * filters (filter[to], filter[from], filter[call_leg_id], filter[call_session_id],
   * filter[created_at][gte|lte]) and paged (page[number], page[size] up to 250).
   */
  list(query: Record<string, string | undefined>): { data: RecordingResource[]; meta: object } {
    const size = Math.min(250, Math.max(1, Number(query['page[size]'] ?? 20) || 20));
    const number = Math.max(1, Number(query['page[number]'] ?? 1) || 1);
    const gte = query['filter[created_at][gte]'];
    const lte = query['filter[created_at][lte]'];
    const fields: [string, (r: Recording) => string][] = [
      ['filter[to]', (r) => r.leg.to],
      ['filter[from]', (r) => r.leg.from],
      ['filter[call_leg_id]', (r) => r.leg.callLegId],
      ['filter[call_session_id]', (r) => r.leg.callSessionId],
    ];
    const matching = [...this.byId.values()]
      .filter(isSaved)
      .filter((r) => fields.every(([k, of]) => query[k] === undefined || of(r) === query[k]))
      // created_at, to the millisecond it shows
      .filter((r) => gte === undefined || Math.floor(r.savedAt) >= Date.parse(gte))
      .filter((r) => lte === undefined || Math.floor(r.savedAt) <= Date.parse(lte))
      .sort((a, b) => a.savedAt - b.savedAt);
    const data = matching.slice((number - 1) * size, number * size).map((r) => this.toResource(r));
    return {
      data,
      meta: {
        page_number: number,
        page_size: size,
        total_pages: Math.max(1, Math.ceil(matching.length / size)),
        total_results: matching.length,
      },
    };
  }

  /** GET /_sim/recordings/{id}.{ext}?expires=&signature=: S3's order: the signature, the key, then the expiry. */
  download(file: string, expires: unknown, signature: unknown): RecordingFile {
    const match = /^([0-9a-f-]{36})\.(wav|mp3)$/.exec(file);
    if (!match) return s3Error(404, 'NoSuchKey', 'The specified key does not exist.');
    const [, id = '', format = ''] = match;
    if (typeof expires !== 'string' || !/^\d{1,16}$/.test(expires) || typeof signature !== 'string') {
      return s3Error(403, 'AccessDenied', 'Query-string authentication requires the expires and signature parameters.');
    }
    if (!this.signed(id, format, expires, signature)) {
      return s3Error(
        403,
        'SignatureDoesNotMatch',
        'The request signature we calculated does not match the signature you provided.',
      );
    }
    const rec = this.byId.get(id);
    if (!rec || rec.savedAt === null || rec.format !== format) {
      return s3Error(404, 'NoSuchKey', 'The specified key does not exist.');
    }
    if (rec.leg.clock() > Number(expires)) return s3Error(403, 'AccessDenied', 'Request has expired');
    this.counts.recordingDownloads++;
    return {
      status: 200,
      contentType: 'audio/wav',
      body: toneWav(durationMs(rec), rec.channels === 'dual' ? 2 : 1, rec.id),
    };
  }

  reset(): void {
    this.byId.clear();
    this.running.clear();
    this.counts = emptyCounts();
  }

  private finish(rec: Recording, at: number): void {
    const leg = rec.leg;
    const left = (this.running.get(leg.callControlId) ?? []).filter((r) => r !== rec);
    if (left.length === 0) this.running.delete(leg.callControlId);
    else this.running.set(leg.callControlId, left);
    rec.endedAt = Math.max(at, rec.startedAt);
    const sentAt = rec.endedAt + RECORDING_SAVED_AFTER_MS;
    this.account.scheduler.after(RECORDING_SAVED_AFTER_MS, () => {
      if (leg.recordingOutcome === 'error') {
        this.counts.recordingErrors++;
        this.emit(leg, callEvents.callRecordingError(leg, rec.clientState, ERROR_REASON, sentAt));
        return;
      }
      rec.savedAt = sentAt;
      this.counts.recordingsSaved++;
      const url = this.url(rec, sentAt + RECORDING_URL_TTL_MS);
      const facts = {
        recordingId: rec.id,
        clientState: rec.clientState,
        format: rec.format,
        channels: rec.channels,
        startedAt: rec.startedAt,
        endedAt: rec.endedAt ?? sentAt,
        url,
      };
      this.emit(leg, callEvents.callRecordingSaved(leg, facts, sentAt));
    });
  }

  private emit(leg: RecordedLeg, event: TelnyxEvent): void {
    const urls = [leg.webhookUrl ?? this.account.webhookUrl()];
    void this.account.sender.emit(event, urls, { lane: leg.callControlId, policy: leg.policy });
  }

  private url(rec: Recording, expiresAt: number): string {
    const expires = String(Math.floor(expiresAt));
    const signature = this.sign(rec.id, rec.format, expires);
    return `${this.base()}/_sim/recordings/${rec.id}.${rec.format}?expires=${expires}&signature=${signature}`;
  }

  private sign(id: string, format: string, expires: string): string {
    return createHmac('sha256', this.secret).update(`${id}.${format}.${expires}`).digest('hex');
  }

  private signed(id: string, format: string, expires: string, signature: string): boolean {
    const expected = Buffer.from(this.sign(id, format, expires), 'hex');
    const given = Buffer.from(/^[0-9a-f]{64}$/.test(signature) ? signature : '', 'hex');
    return given.length === expected.length && timingSafeEqual(given, expected);
  }
}

function durationMs(rec: Recording): number {
  return Math.round((rec.endedAt ?? rec.startedAt) - rec.startedAt);
}

function s3Error(status: number, code: string, message: string): RecordingFile {
  const requestId = randomBytes(8).toString('hex').toUpperCase();
  return {
    status,
    contentType: 'application/xml',
    body: `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message><RequestId>${requestId}</RequestId></Error>`,
  };
}

/** The file route the URLs point at, under /_sim beside the control API (no Bearer key: the signature is the key). */
export function registerRecordingFiles(app: FastifyInstance, recordings: Recordings): void {
  app.get<{ Params: { file: string }; Querystring: Record<string, unknown> }>(
    '/_sim/recordings/:file',
    async (req, reply) => {
      const file = recordings.download(req.params.file, req.query['expires'], req.query['signature']);
      return reply.code(file.status).type(file.contentType).send(file.body);
    },
  );
}
