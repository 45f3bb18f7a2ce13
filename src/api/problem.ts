// API errors, translated once at the HTTP boundary into RFC 9457 problem+json
// with a stable machine `code` (codes.ts) whose `type` links to its entry on the
// API's own /docs/errors. Handlers throw ApiError (or let validation fail);
// anything else is logged and answered as a generic 500 without internals.

import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { Type, type Static } from 'typebox';
import { nearest } from '../cli/command.js';
import { type ErrorCode, errorType, isErrorCode } from './codes.js';
import { named } from './fields.js';
import { isBadInput, isUnavailable } from '../db/errors.js';
import { phoneNumberProblem } from '../numbers/phone.js';
import type { Logger } from '../telemetry/log.js';

export const Problem = named(
  'Problem',
  Type.Object(
    {
      type: Type.String({ description: 'where the code is explained: /docs/errors#<code> on this API' }),
      title: Type.String(),
      status: Type.Integer(),
      code: Type.String(),
      detail: Type.Optional(Type.String()),
      param: Type.Optional(Type.String({ description: 'the field the problem is about' })),
    },
    { description: 'RFC 9457 problem details with a stable machine code' },
  ),
);
export type Problem = Static<typeof Problem>;

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  404: 'Not Found',
  409: 'Conflict',
  408: 'Request Timeout',
  413: 'Payload Too Large',
  414: 'URI Too Long',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Content',
  429: 'Too Many Requests',
  431: 'Request Header Fields Too Large',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    readonly detail?: string,
    readonly param?: string,
    /** Sent with the problem (a 429's Retry-After). */
    readonly headers?: Readonly<Record<string, string>>,
  ) {
    super(detail ?? code);
    this.name = 'ApiError';
  }
}

export const notFound = (what: string) => new ApiError(404, 'resource_not_found', `No such ${what}`);
export const conflict = (code: ErrorCode, detail: string) => new ApiError(409, code, detail);
export const unprocessable = (code: ErrorCode, detail: string, param?: string) =>
  new ApiError(422, code, detail, param);

export function problem(status: number, code: ErrorCode, detail?: string, param?: string): Problem {
  return {
    type: errorType(code),
    title: TITLES[status] ?? 'Error',
    status,
    code,
    ...(detail !== undefined ? { detail } : {}),
    ...(param !== undefined ? { param } : {}),
  };
}

export function sendProblem(reply: FastifyReply, p: Problem): FastifyReply {
  return reply.code(p.status).type('application/problem+json').send(p);
}

export interface AjvError {
  instancePath: string;
  keyword: string;
  message?: string;
  params: Record<string, unknown>;
  parentSchema?: Record<string, unknown>;
  /** The value that failed (Ajv's verbose mode). */
  data?: unknown;
}

/** Fastify's error handler for the API. */
export function apiErrorHandler(log: Logger) {
  return (err: FastifyError & { validation?: AjvError[] }, req: FastifyRequest, reply: FastifyReply) => {
    if (err instanceof ApiError) {
      if (err.headers) reply.headers(err.headers);
      return sendProblem(reply, problem(err.status, err.code, err.detail, err.param));
    }
    if (err.validation && err.validation.length > 0) {
      const where = (err as { validationContext?: string }).validationContext ?? 'body';
      return sendProblem(reply, validationProblem(err.validation, where));
    }
    if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE')
      return sendProblem(reply, problem(413, 'body_too_large', err.message));
    if (err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
      const given = String(req.headers['content-type'] ?? '')
        .split(';')[0]!
        .trim()
        .slice(0, 100);
      const what = given ? `a ${given} body` : 'a body without a Content-Type';
      return sendProblem(reply, problem(415, 'unsupported_media_type', `${what}: send JSON, as application/json`));
    }
    if (isUnavailable(err)) {
      log.warn({ err: err.message, method: req.method, url: req.routeOptions.url }, 'database unavailable');
      reply.header('retry-after', '1');
      return sendProblem(
        reply,
        problem(503, 'service_unavailable', 'The database is briefly unavailable; retry shortly'),
      );
    }
    if (isBadInput(err)) return sendProblem(reply, unstorable());
    if (err.statusCode === 429) return sendProblem(reply, problem(429, 'rate_limited', err.message));
    if (err.statusCode === 414) return sendProblem(reply, problem(414, 'path_too_long', err.message));
    if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
      return sendProblem(
        reply,
        problem(
          err.statusCode === 404 ? 404 : 400,
          err.statusCode === 404 ? 'not_found' : 'invalid_request',
          err.message,
        ),
      );
    }
    log.error({ err: err.message, stack: err.stack, method: req.method, url: req.routeOptions.url }, 'api error');
    return sendProblem(reply, problem(500, 'internal_error', 'Something went wrong on our side'));
  };
}

/** What the database refused to store (a NUL in text, a value out of its range). */
export const unstorable = () =>
  problem(400, 'invalid_request', 'The request contains characters or values that cannot be stored (e.g. NUL)');

/** The problem a schema's refusal is answered with: the first error Ajv found (verbose), where it was found. */
export function validationProblem(errors: readonly AjvError[], where: string): Problem {
  const first = errors[0]!;
  const field = fieldName(first, where);
  if (first.keyword === 'additionalProperties') {
    return problem(422, 'unknown_field', unknownField(first, field, where), field);
  }
  // A schema may name its own error code (x-code), e.g. invalid_phone_number.
  const xCode = first.parentSchema?.['x-code'];
  const code = isErrorCode(xCode) ? xCode : 'invalid_request';
  // A phone number says why in words, not with the pattern it failed.
  const phone =
    code === 'invalid_phone_number' && typeof first.data === 'string' ? phoneNumberProblem(first.data) : null;
  const detail = `${field ? `${field}: ` : ''}${phone ?? wordsOf(first)}`;
  return problem(422, code, detail, field || undefined);
}

/** A schema's refusal, thrown to the error handler as Fastify's own validation would be. */
export class ValidationError extends Error {
  constructor(
    readonly validation: readonly AjvError[],
    readonly validationContext: string,
  ) {
    super('validation failed');
    this.name = 'ValidationError';
  }
}

/** Ajv's message, with what it leaves out: the values an enum allows, the forms a format takes. */
function wordsOf(e: AjvError): string {
  if (e.keyword === 'required') return 'is required';
  const allowed = e.params['allowedValues'];
  if (e.keyword === 'enum' && Array.isArray(allowed)) return `must be one of: ${allowed.join(', ')}`;
  if (e.keyword === 'format' && e.params['format'] === 'date-or-date-time') {
    return 'must be an RFC 3339 date-time (2026-12-01T00:00:00Z) or a day (2026-12-01)';
  }
  return e.message ?? 'is invalid';
}

/**
 * What other messaging APIs call our fields, for "did you mean": Telnyx and
 * Vonage send `text`, Stripe subscribes `enabled_events`, and so on.
 */
const CALLED_ELSEWHERE: Record<string, readonly string[]> = {
  body: ['text', 'message', 'content'],
  to: ['recipient', 'destination'],
  from: ['sender', 'source'],
  media_urls: ['media', 'attachments'],
  send_at: ['scheduled_at', 'schedule_at', 'send_time'],
  event_types: ['events', 'enabled_events', 'filter_types'],
  ring_timeout_secs: ['timeout', 'ring_timeout'],
};

/** "text: no such field — did you mean body?", or the fields there are when none is near. */
function unknownField(e: AjvError, field: string, where: string): string {
  const given = String(e.params['additionalProperty']);
  const known = Object.keys((e.parentSchema?.['properties'] as object | undefined) ?? {});
  const spelled = given.replace(/([a-z])([A-Z])/g, '$1_$2').toLowerCase(); // mediaUrls, Body
  const guess =
    known.find((k) => CALLED_ELSEWHERE[k]?.includes(spelled)) ??
    (known.includes(spelled) ? spelled : null) ??
    nearest(spelled, known);
  const noun = where === 'querystring' ? 'query parameter' : 'field';
  const hint = guess ? ` — did you mean ${guess}?` : known.length ? ` (${noun}s: ${known.join(', ')})` : '';
  return `${field}: no such ${noun}${hint}`;
}

function fieldName(e: AjvError, where: string): string {
  const path = e.instancePath.replace(/^\//, '').replace(/\//g, '.');
  if (e.keyword === 'required') return [path, String(e.params['missingProperty'])].filter(Boolean).join('.');
  if (e.keyword === 'additionalProperties')
    return [path, String(e.params['additionalProperty'])].filter(Boolean).join('.');
  return path || (where === 'body' ? '' : where);
}
