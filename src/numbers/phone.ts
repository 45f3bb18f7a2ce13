// Whether a string is a phone number a carrier could dial, in E.164 form, and if
// not, why in words. "Possible" is libphonenumber's length check for the
// country code, not whether the number is assigned: the 555 range the simulator
// and documentation use stays accepted, while "+999" (no such country) or
// "+1415999" (too short for +1) are refused before they reach the carrier.

import { parsePhoneNumberFromString, validatePhoneNumberLength } from 'libphonenumber-js';

const E164_SHAPE = /^\+[1-9][0-9]{1,14}$/;

const REASONS = {
  INVALID_COUNTRY: 'no country has that calling code',
  TOO_SHORT: 'it is too short for its country',
  TOO_LONG: 'it is too long for its country',
  INVALID_LENGTH: 'its length is not one its country uses',
  NOT_A_NUMBER: 'it is not a phone number',
} as const;

/** Null for a possible E.164 number; otherwise what is wrong with it, for a person. */
export function phoneNumberProblem(value: string): string | null {
  if (!E164_SHAPE.test(value)) {
    return 'must be a phone number in E.164 form: "+", the country code and the number, digits only (e.g. +14155550100)';
  }
  const why = validatePhoneNumberLength(value);
  if (why) return `${value} is not a possible phone number: ${REASONS[why]}`;
  // The parse must give back the same digits: E.164 has one spelling per number.
  if (parsePhoneNumberFromString(value)?.number !== value) return `${value} is not a possible phone number`;
  return null;
}

export const isPossiblePhoneNumber = (value: string) => phoneNumberProblem(value) === null;
