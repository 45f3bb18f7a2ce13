// Twilio's X-Twilio-Signature, held to the official `twilio` package's validator
// (the oracle) and to the test vector Twilio's own documentation and SDK tests
// pin: our signer's output is what the SDK expects, our verifier accepts exactly
// what the SDK accepts over the URL forms we try, and nothing else verifies.

import fc from 'fast-check';
import twilio from 'twilio';
import { describe, expect, it } from 'vitest';
import { parseForm, signedForms, twilioSignature, verifyTwilioSignature } from '../../src/carrier/twilio/signature.js';

const TOKEN = '12345';
const URL_ = 'https://mycompany.com/myapp.php?foo=1&bar=2';
const VECTOR = {
  CallSid: 'CA1234567890ABCDE',
  Caller: '+12349013030',
  Digits: '1234',
  From: '+12349013030',
  To: '+18005551212',
};

const form = (params: Record<string, string | string[]>) => {
  const f = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) for (const x of [v].flat()) f.append(k, x);
  return Buffer.from(f.toString());
};
/** The parameters as a web framework hands them to the SDK: a repeated name as a list. */
const grouped = (params: readonly (readonly [string, string])[]) => {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of params) {
    const had = out[k];
    out[k] = had === undefined ? v : [had, v].flat();
  }
  return out;
};

describe('the Twilio signature', () => {
  it('signs the documented test vector as Twilio does', () => {
    const params = parseForm(form(VECTOR));
    expect(twilioSignature(TOKEN, URL_, params)).toBe('0/KCTR6DLpKmkAf8muzZqo1nDgQ=');
    expect(twilio.validateRequest(TOKEN, '0/KCTR6DLpKmkAf8muzZqo1nDgQ=', URL_, VECTOR)).toBe(true);
    expect(
      verifyTwilioSignature(TOKEN, URL_, form(VECTOR), { 'x-twilio-signature': '0/KCTR6DLpKmkAf8muzZqo1nDgQ=' }),
    ).toBeNull();
  });

  it('what we sign the SDK validates, for any parameters (repeated names, unicode, empty values) and URLs', () => {
    const name = fc.stringMatching(/^[A-Za-z][A-Za-z0-9]{0,12}$/);
    const value = fc.string({ maxLength: 40, unit: 'binary' }).map((v) => v.replace(/[\ud800-\udfff]/g, 'x'));
    fc.assert(
      fc.property(
        fc.array(fc.tuple(name, value), { minLength: 1, maxLength: 12 }),
        fc.constantFrom(
          'https://hooks.example.com/webhooks/twilio',
          'https://hooks.example.com/webhooks/twilio?message=msg_123',
          'http://127.0.0.1:3001/webhooks/twilio?message=msg_1&x=%20y',
        ),
        fc.string({ minLength: 1, maxLength: 20 }),
        (pairs, url, token) => {
          const raw = Buffer.from(new URLSearchParams(pairs.map(([k, v]): [string, string] => [k, v])).toString());
          const params = parseForm(raw);
          const signature = twilioSignature(token, url, params);
          expect(twilio.validateRequest(token, signature, url, grouped(params))).toBe(true);
          expect(verifyTwilioSignature(token, url, raw, { 'x-twilio-signature': signature })).toBeNull();
        },
      ),
      { numRuns: 200 },
    );
  });

  it('refuses a missing, malformed or wrong signature, another token, another URL and a changed parameter', () => {
    const raw = form(VECTOR);
    const good = twilioSignature(TOKEN, URL_, parseForm(raw));
    expect(verifyTwilioSignature(TOKEN, URL_, raw, {})).toBe('missing_signature');
    expect(verifyTwilioSignature(TOKEN, URL_, raw, { 'x-twilio-signature': 'not base64!' })).toBe(
      'malformed_signature',
    );
    expect(verifyTwilioSignature('54321', URL_, raw, { 'x-twilio-signature': good })).toBe('bad_signature');
    expect(verifyTwilioSignature(TOKEN, URL_.replace('https', 'http'), raw, { 'x-twilio-signature': good })).toBe(
      'bad_signature',
    );
    expect(verifyTwilioSignature(TOKEN, `${URL_}&baz=3`, raw, { 'x-twilio-signature': good })).toBe('bad_signature');
    expect(
      verifyTwilioSignature(TOKEN, URL_, form({ ...VECTOR, Digits: '1235' }), { 'x-twilio-signature': good }),
    ).toBe('bad_signature');
    // The SDK agrees on each.
    expect(twilio.validateRequest('54321', good, URL_, VECTOR)).toBe(false);
    expect(twilio.validateRequest(TOKEN, good, `${URL_}&baz=3`, VECTOR)).toBe(false);
  });

  it('a default port added or left out verifies either way, as the SDK allows; another port does not', () => {
    expect(signedForms('https://h.example/a?b=1')).toEqual(['https://h.example/a?b=1', 'https://h.example:443/a?b=1']);
    expect(signedForms('http://127.0.0.1:80/x')).toEqual(['http://127.0.0.1:80/x', 'http://127.0.0.1/x']);
    expect(signedForms('http://127.0.0.1:3001/x')).toEqual(['http://127.0.0.1:3001/x']);
    const raw = form(VECTOR);
    const withPort = twilioSignature(TOKEN, 'https://mycompany.com:443/myapp.php?foo=1&bar=2', parseForm(raw));
    expect(twilio.validateRequest(TOKEN, withPort, URL_, VECTOR)).toBe(true);
    expect(verifyTwilioSignature(TOKEN, URL_, raw, { 'x-twilio-signature': withPort })).toBeNull();
    const otherPort = twilioSignature(TOKEN, 'https://mycompany.com:8443/myapp.php?foo=1&bar=2', parseForm(raw));
    expect(verifyTwilioSignature(TOKEN, URL_, raw, { 'x-twilio-signature': otherPort })).toBe('bad_signature');
  });
});
