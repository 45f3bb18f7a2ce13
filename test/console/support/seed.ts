// An account whose every row has a fixed id and a fixed time, written straight
// into the database with the test factories: what the console's layout tests
// and screenshots show, the same on every run. It is realistic on purpose: a full
// page and more of messages, calls and events, every status, bodies and URLs as
// long as the API allows, rows from the day before, an endpoint with a history of
// failed and succeeded attempts.

import { createHash } from 'node:crypto';
import type pg from 'pg';
import { apiKeyCreate } from '../../../src/accounts/accounts.js';
import type { CallStatus } from '../../../src/calls/calls.sql.js';
import { type Tx, withTx } from '../../../src/db/tx.js';
import type { MessageRow, MessageStatus } from '../../../src/messages/messages.sql.js';
import type { EventType } from '../../../src/outbox/outbox.sql.js';
import { account, call, delivery, endpoint, leg, message, outboundEvent, phoneNumber } from '../../support/factory.js';

/** The moment the browser's clock is fixed at while the seeded account is looked at. */
export const NOW = new Date('2026-03-14T15:30:00.000Z');

/** An id as Handset makes them (prefix, the moment in ms, 16 hex digits), the digits from a hash so they look random. */
function idAt(prefix: string, at: Date, n: number): string {
  const tail = createHash('sha256').update(`${prefix}${n}`).digest('hex').slice(0, 16);
  return `${prefix}_${at.getTime().toString(16).padStart(12, '0')}${tail}`;
}

const minutesBefore = (min: number) => new Date(NOW.getTime() - min * 60_000);
const secondsAfter = (at: Date, s: number) => new Date(at.getTime() + s * 1000);

export const OUR_NUMBERS = ['+13125550401', '+13125550402'] as const;

const LONG_BODY =
  'Hi Jordan, this is Riverside Dental Clinic confirming your appointment with Dr. Amelia Hernández-Whitfield on ' +
  'Thursday at 14:45 at our new Lakeview office (suite 1200, take the north elevators). Please bring your insurance ' +
  'card and arrive ten minutes early to complete the updated medical history form. Reply C to confirm, R to ' +
  'reschedule, or call us on +1 312 555 0199. ';
const UNBROKEN_URL =
  'Track your parcel: https://parcels.example.com/track/PKG-7F3A9C21B4E8D6F0A1C3E5B7D9F2A4C6E8B0D2F4A6C8E0B2D4F6A8C0E2B4D6?utm_source=sms&utm_campaign=spring_dispatch_notifications';

/** One message per line: its status, its body (or media), how long before NOW it was made, and its other party. */
const MESSAGES: {
  status: MessageStatus;
  body: string | null;
  min: number;
  to?: string;
  media?: string[];
  o?: Partial<MessageRow>;
}[] = [
  { status: 'delivered', body: 'Your verification code is 482913. It expires in 10 minutes.', min: 2 },
  { status: 'sent', body: LONG_BODY.repeat(4).slice(0, 1600), min: 5 },
  { status: 'queued', body: 'Reminder: the team stand-up moves to 09:30 tomorrow.', min: 6 },
  { status: 'failed', body: 'Your table for 4 at 19:30 is ready.', min: 9, o: { error_code: '40300' } },
  { status: 'received', body: 'STOP', min: 12, to: OUR_NUMBERS[0] },
  { status: 'scheduled', body: 'Happy birthday from all of us at Riverside!', min: 14 },
  { status: 'canceled', body: 'Flash sale starts now — 30% off everything until midnight.', min: 18 },
  { status: 'delivered', body: UNBROKEN_URL, min: 22 },
  {
    status: 'delivered',
    body: 'Ваш код подтверждения: 771204. Никому его не сообщайте.',
    min: 25,
    o: { encoding: 'UCS-2' },
  },
  { status: 'received', body: null, min: 31, to: OUR_NUMBERS[1], media: ['https://media.example.com/mms/photo-1.jpg'] },
  { status: 'delivered', body: LONG_BODY, min: 40 },
  { status: 'failed', body: 'Your one-time passcode is 002211.', min: 47, o: { error_code: '40008' } },
  { status: 'delivered', body: 'Thanks! Your order #A-22917 has shipped.', min: 55 },
  { status: 'received', body: 'Yes, Thursday works for me. See you then!', min: 63, to: OUR_NUMBERS[0] },
  { status: 'delivered', body: 'Your driver, Sam, is 3 minutes away in a grey Toyota Prius.', min: 71 },
  { status: 'sent', body: 'Invoice INV-2026-0311 for $1,240.00 is due on March 31.', min: 80 },
  { status: 'delivered', body: 'Power restored in your area. Thank you for your patience.', min: 92 },
  { status: 'delivered', body: 'Code: 5531', min: 110 },
  { status: 'delivered', body: LONG_BODY.slice(0, 300), min: 130 },
  { status: 'failed', body: 'We could not process your payment.', min: 170, o: { error_code: '40002' } },
  { status: 'delivered', body: 'Welcome to Riverside text alerts. Reply HELP for help, STOP to end.', min: 240 },
  // the day before
  { status: 'delivered', body: 'Your prescription is ready for pickup.', min: 980 },
  { status: 'received', body: 'Running 10 minutes late, sorry!', min: 1000, to: OUR_NUMBERS[1] },
  { status: 'delivered', body: 'Good night! Your evening summary is ready.', min: 1050 },
];

const CALLS: { status: CallStatus; min: number; targets: string[]; inbound?: boolean }[] = [
  { status: 'ringing', min: 1, targets: ['+15555550410', '+15555550411', '+15555550412'] },
  { status: 'in_progress', min: 3, targets: ['+15555550420'] },
  {
    status: 'completed',
    min: 8,
    targets: ['+15555550430', '+15555550431', '+15555550432', '+15555550433', '+15555550434', '+15555550435'],
  },
  { status: 'missed', min: 15, targets: ['+15555550440', '+15555550441'] },
  { status: 'completed', min: 26, targets: ['+13125550401'], inbound: true },
  { status: 'missed', min: 38, targets: ['+13125550402'], inbound: true },
  { status: 'completed', min: 61, targets: ['+15555550450', '+15555550451', '+15555550452'] },
  { status: 'completed', min: 1020, targets: ['+15555550460'] },
];

const EVENT_TYPES: EventType[] = [
  'message.delivered',
  'message.sent',
  'message.failed',
  'message.received',
  'call.answered',
  'call.completed',
  'call.missed',
  'webhook_endpoint.test',
  'webhook_endpoint.disabled',
  'opt_out.created',
];

export interface Seeded {
  key: string;
  accountId: string;
  messageIds: string[];
  callIds: string[];
  eventIds: string[];
  endpointIds: string[];
  /** The endpoint with a history of attempts (its page's health and table). */
  busyEndpointId: string;
  /** An event delivered to two endpoints, on the second try to one of them, the day after it happened. */
  deliveredEventId: string;
}

export async function seedAccount(pool: pg.Pool): Promise<Seeded> {
  return withTx(pool, async (tx) => {
    const accountId = idAt('acct', minutesBefore(2000), 0);
    await account(tx, { id: accountId, name: 'Riverside Dental', created_at: minutesBefore(2000) });
    const { key } = await apiKeyCreate(tx, accountId, { now: minutesBefore(2000) });
    for (const [i, number] of OUR_NUMBERS.entries())
      await phoneNumber(tx, { id: idAt('num', minutesBefore(1990), i), account_id: accountId, number });

    const messageIds: string[] = [];
    for (const [i, m] of MESSAGES.entries()) {
      const at = minutesBefore(m.min);
      const id = idAt('msg', at, i);
      const inbound = m.status === 'received';
      const to = m.to ?? `+1555555${String(1000 + i * 37).slice(-4)}`;
      await message(tx, {
        id,
        account_id: accountId,
        status: m.status,
        direction: inbound ? 'inbound' : 'outbound',
        from_number: inbound ? `+1415555${String(2000 + i).slice(-4)}` : OUR_NUMBERS[i % 2]!,
        to_number: to,
        body: m.body,
        media_urls: m.media ?? [],
        encoding: m.media ? 'MMS' : 'GSM-7',
        segments: m.body ? Math.max(1, Math.ceil(m.body.length / 153)) : 1,
        created_at: at,
        carrier_message_id: m.status === 'queued' || m.status === 'scheduled' ? null : `tx-${id}`,
        sent_at: ['sent', 'delivered', 'failed'].includes(m.status) ? secondsAfter(at, 1) : null,
        completed_at: ['delivered', 'failed', 'received'].includes(m.status)
          ? secondsAfter(at, 4)
          : m.status === 'canceled'
            ? secondsAfter(at, 60)
            : null,
        send_at: m.status === 'scheduled' || m.status === 'canceled' ? secondsAfter(NOW, 86_400) : null,
        ...m.o,
      });
      messageIds.push(id);
    }

    const callIds: string[] = [];
    for (const [i, c] of CALLS.entries()) {
      const at = minutesBefore(c.min);
      const id = idAt('call', at, i);
      const answered = c.status === 'completed' || c.status === 'in_progress';
      const ended = c.status === 'completed' || c.status === 'missed';
      const duration = c.status === 'completed' ? 42 + i * 31 : c.status === 'missed' ? 0 : null;
      await call(tx, {
        id,
        account_id: accountId,
        status: c.status,
        direction: c.inbound ? 'inbound' : 'outbound',
        from_number: c.inbound ? `+1415555${String(3000 + i).slice(-4)}` : OUR_NUMBERS[0],
        number: OUR_NUMBERS[0],
        ring_plan: { targets: c.targets, timeout: 20, next: c.targets.length },
        created_at: at,
        answered_at: answered ? secondsAfter(at, 12) : null,
        ended_at: ended ? secondsAfter(at, 12 + (duration ?? 0)) : null,
        duration_seconds: duration,
      });
      await writeLegs(tx, id, c, at, i);
      callIds.push(id);
    }

    const endpointIds: string[] = [];
    const endpointSpecs = [
      {
        url: 'https://hooks.riverside-dental.example.com/handset/webhooks/production/messages-and-calls?tenant=lakeview&region=us-central&version=2026-03-01',
        description:
          'Production receiver behind the Lakeview load balancer; pages the on-call engineer after five failures in a row.',
        event_types: [...EVENT_TYPES.slice(0, 8)],
        state: 'failing' as const,
      },
      {
        url: 'https://example.org/hooks',
        description: null,
        event_types: [] as EventType[],
        state: 'enabled' as const,
      },
      {
        url: 'https://staging.riverside-dental.example.com/webhooks/handset',
        description: 'Staging',
        event_types: ['message.delivered', 'message.failed'] as EventType[],
        state: 'disabled' as const,
      },
    ];
    for (const [i, spec] of endpointSpecs.entries()) {
      const at = minutesBefore(1500 - i * 10);
      const { state, ...columns } = spec;
      const id = idAt('ep', at, i);
      await endpoint(tx, { id, account_id: accountId, created_at: at, updated_at: at, state, ...columns });
      endpointIds.push(id);
    }
    const [busy, quiet] = endpointIds as [string, string];
    const busyUrl = endpointSpecs[0]!.url;

    // events, newest first in the list: a full page and more, of every kind of subject
    const eventIds: string[] = [];
    const subjects = [...messageIds.slice(0, 12), ...callIds.slice(0, 6), ...endpointIds];
    for (let i = 0; i < 24; i++) {
      const at = secondsAfter(minutesBefore(i * 7 + 1), 0.25 * i);
      const subject = subjects[i % subjects.length]!;
      eventIds.push(await event(tx, accountId, idAt('evt', at, i), EVENT_TYPES[i % EVENT_TYPES.length]!, subject, at));
    }

    // the busy endpoint's history: a delivery of each of the last twelve events, some retried, the latest failing
    let attemptNo = 0;
    for (const [i, eventId] of eventIds.slice(0, 12).entries()) {
      const tries = i < 2 ? 3 : i % 4 === 1 ? 2 : 1;
      const failed = i < 2;
      const dlv = await delivery(tx, {
        id: idAt('dlv', NOW, i),
        endpoint_id: busy,
        event_id: eventId,
        status: failed ? 'failed' : 'succeeded',
        attempts: tries,
        next_attempt_at: null,
      });
      const first = secondsAfter(minutesBefore(i * 7 + 1), 1);
      for (let t = 1; t <= tries; t++) {
        const ok = !failed && t === tries;
        const startedAt = secondsAfter(first, (t - 1) * 30);
        await attempt(tx, idAt('att', startedAt, attemptNo++), dlv.id, busyUrl, {
          attempt: t,
          started_at: startedAt,
          duration_ms: ok ? 80 + ((i * 37) % 400) : 15_000,
          response_status: ok ? 200 : t === 1 && !failed ? 503 : null,
          response_excerpt: ok
            ? '{"received":true,"handler":"riverside-webhooks@4.2.1","queue_depth":0}'
            : t === 1 && !failed
              ? '<html><head><title>503 Service Temporarily Unavailable</title></head><body><center><h1>503 Service Temporarily Unavailable</h1></center><hr><center>nginx</center></body></html>'
              : null,
          error: ok || (t === 1 && !failed) ? null : 'timeout: no answer within 15 s',
        });
      }
    }

    // who opted out, each way one can
    const optOuts = [
      ['+14155550777', OUR_NUMBERS[0], 'keyword', 12],
      ['+14155550778', OUR_NUMBERS[0], 'api', 95],
      ['+14155550779', OUR_NUMBERS[1], 'carrier', 300],
      ['+447700900123', OUR_NUMBERS[1], 'keyword', 1200],
    ] as const;
    for (const [i, [recipient, number, source, min]] of optOuts.entries()) {
      const at = minutesBefore(min);
      await tx.query(
        `INSERT INTO opt_outs (id, account_id, number, recipient, source, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
        [idAt('opt', at, i), accountId, number, recipient, source, at],
      );
    }

    // an event of the evening before, refused at 23:59:58 by one endpoint and delivered to it after midnight
    const evening = new Date('2026-03-13T23:59:41.250Z');
    const deliveredEventId = await event(
      tx,
      accountId,
      idAt('evt', evening, 99),
      'message.delivered',
      messageIds[21]!,
      evening,
    );
    for (const [i, ep] of [busy, quiet].entries()) {
      const dlv = await delivery(tx, {
        id: idAt('dlv', evening, 50 + i),
        endpoint_id: ep,
        event_id: deliveredEventId,
        status: 'succeeded',
        attempts: i === 0 ? 2 : 1,
      });
      const url = i === 0 ? busyUrl : endpointSpecs[1]!.url;
      if (i === 0)
        await attempt(tx, idAt('att', new Date('2026-03-13T23:59:58.412Z'), 90), dlv.id, url, {
          attempt: 1,
          started_at: new Date('2026-03-13T23:59:58.412Z'),
          duration_ms: 1204,
          response_status: 500,
          response_excerpt: '{"error":"database is restarting, try again shortly"}',
          error: null,
        });
      const startedAt = i === 0 ? new Date('2026-03-14T00:00:28.907Z') : new Date('2026-03-13T23:59:42.031Z');
      await attempt(tx, idAt('att', startedAt, 91 + i), dlv.id, url, {
        attempt: i === 0 ? 2 : 1,
        started_at: startedAt,
        duration_ms: i === 0 ? 143 : 57,
        response_status: 200,
        response_excerpt: 'ok',
        error: null,
      });
    }
    return { key, accountId, messageIds, callIds, eventIds, endpointIds, busyEndpointId: busy, deliveredEventId };
  });
}

/** An outbound event about a subject (its data trimmed to the subject's id and sequence). */
async function event(tx: Tx, accountId: string, id: string, type: EventType, subject: string, at: Date) {
  await outboundEvent(tx, {
    id,
    account_id: accountId,
    type,
    subject_id: subject,
    data: { id: subject, sequence: 2 },
    occurred_at: at,
    created_at: at,
  });
  return id;
}

/** One HTTP attempt of a delivery, as the deliverer records it. */
async function attempt(
  tx: Tx,
  id: string,
  deliveryId: string,
  url: string,
  a: {
    attempt: number;
    started_at: Date;
    duration_ms: number;
    response_status: number | null;
    response_excerpt: string | null;
    error: string | null;
  },
): Promise<void> {
  await tx.query(
    `INSERT INTO webhook_attempts (id, delivery_id, attempt, trigger, url, started_at, duration_ms, response_status,
                                   response_excerpt, error)
     VALUES ($1, $2, $3, 'scheduled', $4, $5, $6, $7, $8, $9)`,
    [id, deliveryId, a.attempt, url, a.started_at, a.duration_ms, a.response_status, a.response_excerpt, a.error],
  );
}

/** A call's legs as its status implies: the earlier targets unanswered, the last answered or still ringing. */
async function writeLegs(
  tx: Tx,
  callId: string,
  c: { status: CallStatus; targets: string[] },
  at: Date,
  n: number,
): Promise<void> {
  for (const [i, to] of c.targets.entries()) {
    const last = i === c.targets.length - 1;
    const dialed = secondsAfter(at, i * 20);
    const status =
      !last || c.status === 'missed'
        ? 'no_answer'
        : c.status === 'ringing'
          ? 'ringing'
          : c.status === 'in_progress'
            ? 'answered'
            : 'completed';
    await leg(tx, {
      id: idAt('leg', dialed, n * 10 + i),
      call_id: callId,
      status,
      to_number: to,
      created_at: dialed,
      carrier_ref: `leg-${callId}-${i}`,
      dialed_at: dialed,
      answered_at: status === 'answered' || status === 'completed' ? secondsAfter(dialed, 8) : null,
      ended_at:
        status === 'no_answer' ? secondsAfter(dialed, 20) : status === 'completed' ? secondsAfter(dialed, 60) : null,
      hangup_cause: status === 'no_answer' ? 'timeout' : status === 'completed' ? 'normal_clearing' : null,
    });
  }
}
