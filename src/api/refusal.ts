// A domain's "no" to a customer's request, as a result rather than an exception:
// a stable machine code, the words for a person, and the field it is about. The
// API answers it 422 problem+json (problem.ts).

import type { ErrorCode } from './codes.js';

export type Refusal = { refused: true; code: ErrorCode; detail: string; param?: string };

export const refuse = (code: ErrorCode, detail: string, param?: string): Refusal => ({
  refused: true,
  code,
  detail,
  ...(param ? { param } : {}),
});

export const isRefusal = (v: object): v is Refusal => 'refused' in v;
