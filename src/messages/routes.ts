// Customer API for messages: send (now or at send_at, one or a batch), cancel a scheduled one,
// read one with its status history, and list them.

import { type Static, Type } from 'typebox';
import { named, Nullable, Sequence, Time } from '../api/fields.js';
import { createIdempotently, IdempotencyHeaders, sendCreated } from '../api/idempotency.js';
import { ok, problems } from '../api/openapi.js';
import { cursorOf, listOf, listQuery, page } from '../api/pagination.js';
import { conflict, notFound, Problem, problem, unprocessable } from '../api/problem.js';
import { isRefusal } from '../api/refusal.js';
import type { EventSchemas } from '../outbox/outbox.sql.js';
import type { ApiRoutes } from '../api/server.js';
import { withTx } from '../db/tx.js';
import { E164 } from '../numbers/numbers.js';
import { MAX_MEDIA_URL_LENGTH } from './media.js';
import { BATCH_BODY_LIMIT, batchBody, MAX_BATCH, validItems } from './batch.js';
import {
  cancelMessage,
  createMessage,
  createMessages,
  MAX_BODY_CHARACTERS,
  MAX_VALIDITY_SECONDS,
  messageResource,
  type NewMessage,
} from './messages.js';
import {
  ENCODINGS,
  HISTORY_EFFECTS,
  HISTORY_SOURCES,
  historyList,
  MESSAGE_DIRECTIONS,
  MESSAGE_STATUSES,
  messageList,
  messageOfAccount,
} from './messages.sql.js';

const MessageStatus = named(
  'MessageStatus',
  Type.Enum([...MESSAGE_STATUSES], {
    description: 'scheduled, queued, sent, delivered, failed, canceled (outbound); received (inbound)',
  }),
);
const MessageDirection = named('MessageDirection', Type.Enum([...MESSAGE_DIRECTIONS]));

const Message = named(
  'Message',
  Type.Object({
    id: Type.String(),
    direction: MessageDirection,
    from: Type.String(),
    to: Type.String(),
    body: Nullable(Type.String()),
    media_urls: Type.Array(Type.String()),
    status: MessageStatus,
    encoding: Type.Enum([...ENCODINGS]),
    segments: Type.Integer({
      description: 'the parts we count the text in, as carriers split it: the estimate at create',
    }),
    carrier_segments: Nullable(
      Type.Integer({ description: 'the parts the carrier said it sent (and bills), once sent; billing follows it' }),
    ),
    error_code: Nullable(Type.String()),
    carrier: Type.String({ description: 'the carrier it was (or will be) sent through' }),
    carrier_message_id: Nullable(Type.String()),
    fallback_from: Nullable(
      Type.String({
        description: 'the number (on another carrier) it may be sent from when its carrier did not take it',
      }),
    ),
    failover: Nullable(
      named(
        'MessageFailover',
        Type.Object(
          {
            carrier: Type.String({ description: 'the carrier it left' }),
            from: Type.String({ description: 'the number it left' }),
            reason: Type.String({ description: 'why: how that carrier certainly did not take it' }),
          },
          { description: 'set when the message failed over: `from` and `carrier` then name what sent it' },
        ),
      ),
    ),
    tenant_id: Nullable(Type.String()),
    send_at: Nullable(Time),
    /** Not sent by then (validity_period), it fails as `expired`. */
    expires_at: Nullable(Time),
    created_at: Time,
    sent_at: Nullable(Time),
    completed_at: Nullable(Time),
    sequence: Sequence,
  }),
);

const StatusHistoryEntry = named(
  'MessageStatusHistoryEntry',
  Type.Object({
    source: Type.Enum([...HISTORY_SOURCES]),
    carrier: Nullable(Type.String({ description: 'the carrier this word came from or is about' })),
    status: Type.String(),
    carrier_status: Nullable(Type.String()),
    error_code: Nullable(Type.String()),
    effect: Type.Enum([...HISTORY_EFFECTS]),
    note: Nullable(Type.String()),
    occurred_at: Time,
  }),
);

/** One message to create: the body of POST /messages, and each item of a batch. */
export const CreateMessageBody = named(
  'CreateMessageRequest',
  Type.Object(
    {
      from: E164,
      to: E164,
      body: Type.Optional(Type.String({ maxLength: MAX_BODY_CHARACTERS })),
      media_urls: Type.Optional(
        Type.Array(
          Type.String({
            pattern: '^https://',
            maxLength: MAX_MEDIA_URL_LENGTH,
            'x-code': 'invalid_media_url',
            description: 'a public https URL the carrier fetches',
          }),
          {
            maxItems: 10,
          },
        ),
      ),
      send_at: Type.Optional(
        Type.String({ format: 'date-time', 'x-code': 'invalid_send_at', description: 'up to 35 days ahead' }),
      ),
      validity_period: Type.Optional(
        Type.Integer({
          minimum: 1,
          maximum: MAX_VALIDITY_SECONDS,
          description:
            'seconds from send_at (or now) within which it must be sent; not sent by then, it fails as ' +
            '`expired` (one message.failed, nothing billed)',
        }),
      ),
      fallback_from: Type.Optional(
        Type.String({
          ...E164,
          description:
            'another number of the account, on another carrier: the message is sent from it, through its carrier, ' +
            'only when the first carrier certainly did not take it (422 invalid_fallback otherwise)',
        }),
      ),
    },
    { additionalProperties: false },
  ),
);

const MessageBatch = named(
  'MessageBatch',
  Type.Object({
    data: Type.Array(
      named(
        'MessageBatchItem',
        Type.Object(
          {
            index: Type.Integer({ minimum: 0, description: 'the item’s place in the request, from 0' }),
            message: Type.Optional(Message),
            error: Type.Optional(Problem),
          },
          { description: 'one item’s result: `message` when it was created, `error` (422) when it was refused' },
        ),
      ),
    ),
  }),
);

/** What a create asks for, as createMessage(s) takes it. */
function newMessageOf(b: Static<typeof CreateMessageBody>): Omit<NewMessage, 'accountId'> {
  return {
    from: b.from,
    to: b.to,
    body: b.body || null,
    mediaUrls: b.media_urls ?? [],
    sendAt: b.send_at ? new Date(b.send_at) : null,
    fallbackFrom: b.fallback_from ?? null,
    validityPeriod: b.validity_period ?? null,
  };
}

const IdParams = Type.Object({ id: Type.String({ maxLength: 64 }) });

/** The events about a message: each carries the message as it is after its transition. */
export const messageEvents = {
  'message.sent': Message,
  'message.delivered': Message,
  'message.failed': Message,
  'message.canceled': Message,
  'message.received': Message,
} as const satisfies EventSchemas;

export const messageRoutes: ApiRoutes = (app, ctx) => {
  const tags = ['Messages'];
  app.post(
    '/messages',
    {
      schema: {
        tags,
        operationId: 'createMessage',
        summary: 'Send an SMS or MMS, now or at send_at',
        headers: IdempotencyHeaders,
        body: CreateMessageBody,
        response: { 201: ok('The message, queued (or scheduled)', Message), ...problems(409) },
      },
    },
    async (req, reply) => {
      const { accountId } = req.principal;
      const created = await createIdempotently(ctx.pool, req, accountId, async (tx) => {
        const m = await createMessage(tx, { accountId, ...newMessageOf(req.body) }, new Date(), ctx.config.dispatch);
        if (isRefusal(m)) throw unprocessable(m.code, m.detail, m.param);
        return { status: 201, body: messageResource(m) };
      });
      return sendCreated(reply, created);
    },
  );

  app.post(
    '/messages/batch',
    {
      bodyLimit: BATCH_BODY_LIMIT,
      // Items the schema refuses are answered in their place (batch.ts), not by refusing the batch.
      attachValidation: true,
      schema: {
        tags,
        operationId: 'createMessageBatch',
        summary: `Send up to ${MAX_BATCH.toLocaleString('en')} messages in one request`,
        description:
          'Each item is taken exactly as `POST /v1/messages` takes its body. Every valid item is stored in one ' +
          'transaction; each invalid one is answered in its place with the problem `POST /v1/messages` would give ' +
          'it, and nothing else about the batch changes. A batch the API cannot read as a whole (not JSON, no ' +
          `\`messages\`, none or more than ${MAX_BATCH.toLocaleString('en')}, too large) is refused whole.`,
        headers: IdempotencyHeaders,
        body: batchBody(CreateMessageBody),
        response: { 201: ok('Each item, created or refused, in the order given', MessageBatch), ...problems(409) },
      },
    },
    async (req, reply) => {
      const { accountId } = req.principal;
      const items = validItems(req, CreateMessageBody);
      const created = await createIdempotently(ctx.pool, req, accountId, async (tx) => {
        const valid = items.flatMap((item) => ('problem' in item ? [] : [newMessageOf(item.input)]));
        const made = await createMessages(tx, accountId, valid, new Date(), ctx.config.dispatch);
        let next = 0;
        const data = items.map((item, index) => {
          if ('problem' in item) return { index, error: item.problem };
          const m = made[next++]!;
          return isRefusal(m)
            ? { index, error: problem(422, m.code, m.detail, m.param) }
            : { index, message: messageResource(m) };
        });
        return { status: 201, body: { data } };
      });
      return sendCreated(reply, created);
    },
  );

  app.get(
    '/messages',
    {
      schema: {
        tags,
        operationId: 'listMessages',
        summary: 'List messages, newest first',
        querystring: listQuery({
          status: Type.Optional(MessageStatus),
          direction: Type.Optional(MessageDirection),
        }),
        response: { 200: ok('A page of messages', listOf(Message)) },
      },
    },
    async (req) => {
      const q = req.query;
      const rows = await messageList(
        ctx.pool,
        req.principal.accountId,
        { status: q.status, direction: q.direction },
        q.limit,
        await cursorOf(q.starting_after, (id) => messageOfAccount(ctx.pool, req.principal.accountId, id)),
      );
      const p = page(rows, q.limit);
      return { data: p.data.map(messageResource), has_more: p.has_more };
    },
  );

  app.get(
    '/messages/:id',
    {
      schema: {
        tags,
        operationId: 'getMessage',
        summary: 'Get a message',
        params: IdParams,
        response: { 200: ok('The message', Message) },
      },
    },
    async (req) => {
      const m = await messageOfAccount(ctx.pool, req.principal.accountId, req.params.id);
      if (!m) throw notFound('message');
      return messageResource(m);
    },
  );

  app.get(
    '/messages/:id/status_history',
    {
      schema: {
        tags,
        operationId: 'listMessageStatusHistory',
        summary:
          'Every word about this message: API, dispatcher and each carrier receipt, and whether it changed the message',
        params: IdParams,
        response: { 200: ok("The message's timeline, oldest first", listOf(StatusHistoryEntry)) },
      },
    },
    async (req) => {
      const m = await messageOfAccount(ctx.pool, req.principal.accountId, req.params.id);
      if (!m) throw notFound('message');
      const rows = await historyList(ctx.pool, m.id);
      const data = rows.map((h) => ({
        source: h.source,
        carrier: h.carrier,
        status: h.status,
        carrier_status: h.carrier_status,
        error_code: h.error_code,
        effect: h.effect,
        note: h.note,
        occurred_at: h.occurred_at.toISOString(),
      }));
      return { data, has_more: false };
    },
  );

  app.post(
    '/messages/:id/cancel',
    {
      schema: {
        tags,
        operationId: 'cancelMessage',
        summary: 'Cancel a scheduled message (409 once it is no longer scheduled)',
        params: IdParams,
        response: { 200: ok('The message, canceled', Message), ...problems(409) },
      },
    },
    async (req) => {
      const { accountId } = req.principal;
      const m = await withTx(ctx.pool, async (tx) => {
        const canceled = await cancelMessage(tx, accountId, req.params.id, new Date());
        if (canceled) return canceled;
        const existing = await messageOfAccount(tx, accountId, req.params.id);
        if (!existing) throw notFound('message');
        throw conflict(
          'message_not_cancelable',
          `Only a scheduled message can be canceled; this one is ${existing.status}`,
        );
      });
      return messageResource(m);
    },
  );
};
