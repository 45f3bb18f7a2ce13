// How a text is split into SMS parts, by example: the cases carriers and the old
// division by 153/67 disagree on (an escape or a surrogate pair at a part boundary),
// the exact single-part limits, the characters whose encoding is a decision, and MMS.

import { describe, expect, it } from 'vitest';
import { segmentsOf, splitSms } from '../../src/messages/segments.js';

const a = (n: number) => 'a'.repeat(n);
const zh = (n: number) => 'ж'.repeat(n);

describe('escapes and surrogate pairs are never split', () => {
  it('a×152 + { + a×152 is 3 parts: the { would straddle septet 153, so part 1 takes 152 septets', () => {
    expect(splitSms(a(152) + '{' + a(152))).toEqual({ encoding: 'GSM-7', parts: [a(152), '{' + a(151), a(1)] });
    expect(segmentsOf(a(152) + '{' + a(152))).toEqual({ encoding: 'GSM-7', segments: 3 });
  });

  it('ж×66 + 😀 + ж×66 is 3 parts: the 😀 would straddle unit 67, so part 1 takes 66 units', () => {
    expect(splitSms(zh(66) + '😀' + zh(66))).toEqual({ encoding: 'UCS-2', parts: [zh(66), '😀' + zh(65), zh(1)] });
    expect(segmentsOf(zh(66) + '😀' + zh(66))).toEqual({ encoding: 'UCS-2', segments: 3 });
  });

  it('an escape at septets 153–154 starts part 2; one at 152–153 ends part 1', () => {
    expect(splitSms(a(152) + '€' + a(10)).parts).toEqual([a(152), '€' + a(10)]);
    expect(splitSms(a(151) + '€' + a(10)).parts).toEqual([a(151) + '€', a(10)]);
  });

  it('a surrogate pair at units 67–68 starts part 2; one at 66–67 ends part 1', () => {
    expect(splitSms(zh(66) + '😀' + zh(10)).parts).toEqual([zh(66), '😀' + zh(10)]);
    expect(splitSms(zh(65) + '😀' + zh(10)).parts).toEqual([zh(65) + '😀', zh(10)]);
  });

  it('a skin-tone modifier is a code point of its own and may start the next part', () => {
    expect(splitSms(zh(65) + '👍🏽' + zh(10)).parts).toEqual([zh(65) + '👍', '🏽' + zh(10)]);
  });

  it('a lone surrogate counts one unit', () => {
    expect(splitSms(zh(69) + '\ud83d')).toEqual({ encoding: 'UCS-2', parts: [zh(69) + '\ud83d'] });
  });
});

describe('single-part limits', () => {
  it('160 GSM-7 septets are one part; 161 are two, 153 + 8', () => {
    expect(splitSms(a(160)).parts).toEqual([a(160)]);
    expect(splitSms(a(161)).parts).toEqual([a(153), a(8)]);
  });

  it('an escape ending at septet 160 still fits one part; ending at 161 it does not', () => {
    expect(splitSms(a(158) + '|').parts).toEqual([a(158) + '|']);
    expect(splitSms(a(159) + '|').parts).toEqual([a(153), a(6) + '|']);
  });

  it('70 UCS-2 units are one part; 71 are two, 67 + 4', () => {
    expect(splitSms(zh(70)).parts).toEqual([zh(70)]);
    expect(splitSms(zh(71)).parts).toEqual([zh(67), zh(4)]);
  });

  it('a surrogate pair ending at unit 70 still fits one part; ending at 71 it does not', () => {
    expect(splitSms(zh(68) + '😀').parts).toEqual([zh(68) + '😀']);
    expect(splitSms(zh(69) + '😀').parts).toEqual([zh(67), zh(2) + '😀']);
  });

  it('an empty text is one GSM-7 part', () => {
    expect(splitSms('')).toEqual({ encoding: 'GSM-7', parts: [''] });
  });
});

describe('which characters are GSM-7', () => {
  it('Ç is GSM-7 and ç is not', () => {
    expect(splitSms('Ç').encoding).toBe('GSM-7');
    expect(splitSms('ç').encoding).toBe('UCS-2');
  });

  it('LF and CR are one septet each', () => {
    expect(splitSms('\r\n'.repeat(80)).parts).toHaveLength(1);
    expect(splitSms('\r\n'.repeat(80) + 'a')).toMatchObject({ encoding: 'GSM-7', parts: { length: 2 } });
  });

  it('¤ and $ are one septet each, form feed two', () => {
    expect(splitSms('¤$'.repeat(80)).parts).toHaveLength(1);
    expect(splitSms('\f'.repeat(80)).parts).toHaveLength(1);
    expect(splitSms('\f'.repeat(80) + 'a')).toMatchObject({ encoding: 'GSM-7', parts: { length: 2 } });
  });

  it('one character outside GSM-7 makes the whole text UCS-2, GSM-7 characters then one unit each', () => {
    expect(splitSms('{'.repeat(69) + 'ç')).toEqual({ encoding: 'UCS-2', parts: ['{'.repeat(69) + 'ç'] });
  });
});

describe('MMS', () => {
  it('any media makes it one MMS, however long the body', () => {
    expect(segmentsOf(a(1600), ['https://a.example/x.png'])).toEqual({ encoding: 'MMS', segments: 1 });
    expect(segmentsOf(zh(1600), ['https://a.example/x.png', 'https://a.example/y.png'])).toEqual({
      encoding: 'MMS',
      segments: 1,
    });
    expect(segmentsOf(null, ['https://a.example/x.png'])).toEqual({ encoding: 'MMS', segments: 1 });
  });

  it('no media and no body is one GSM-7 segment', () => {
    expect(segmentsOf(null)).toEqual({ encoding: 'GSM-7', segments: 1 });
  });
});
