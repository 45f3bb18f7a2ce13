// How the simulated carrier splits a text into parts and prices it, the numbers it
// reports as `encoding`, `parts` and `cost` in the send response and receipts.
// The split is Handset's own, from messages/segments (escapes and surrogate pairs
// never split across two parts); its tests hold it against an independent segment
// calculator, so the simulator cannot merely agree with a mistake. An MMS is one
// part, reported with its text's encoding.

import { splitSms, type TextEncoding } from '../messages/segments.js';

export type Encoding = TextEncoding;

export interface Segments {
  encoding: Encoding;
  parts: number;
}

export function segmentsOf(text: string, isMms: boolean): Segments {
  const { encoding, parts } = splitSms(text);
  return { encoding, parts: isMms ? 1 : parts.length };
}

export interface Money {
  amount: string;
  currency: 'USD';
}

export interface Price {
  cost: Money;
  costBreakdown: { carrier_fee: Money; rate: Money };
}

// Per part, from the Telnyx documentation's example (0.0051 = 0.00205 rate + 0.00305 carrier fee).
const SMS_RATE = 0.00205;
const SMS_CARRIER_FEE = 0.00305;
const MMS_RATE = 0.015;
const MMS_CARRIER_FEE = 0.005;

export function priceOf(parts: number, isMms: boolean): Price {
  const rate = (isMms ? MMS_RATE : SMS_RATE) * parts;
  const fee = (isMms ? MMS_CARRIER_FEE : SMS_CARRIER_FEE) * parts;
  return {
    cost: usd(rate + fee, 4),
    costBreakdown: { carrier_fee: usd(fee, 5), rate: usd(rate, 5) },
  };
}

function usd(amount: number, digits: number): Money {
  return { amount: amount.toFixed(digits), currency: 'USD' };
}
