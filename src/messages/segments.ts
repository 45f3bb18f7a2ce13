// SMS segments, computed when a message is created: how a carrier splits a text
// into parts, and so how many parts are billed. Any media makes it one MMS.
//
// Encoding. GSM-7 when every character is in the GSM 03.38 alphabet, otherwise
// UCS-2 counted in UTF-16 code units. The alphabet is the 127 characters of the
// default table (its 128th code, 0x1B, is the escape) plus the 10 of the
// extension table, which are sent as escape + code and so take two septets:
// form feed and ^ { } \ [ ~ ] | €. Deliberately:
// - 0x09 is the capital Ç, as the standard's table and Unicode's mapping of it
//   have it; a small ç is not GSM-7 and makes the message UCS-2.
// - LF (0x0A) and CR (0x0D) are basic characters, one septet each (CRLF is two).
// - ¤ (0x24) and $ (0x02) are both basic characters.
// - No national language shift tables (Turkish, Spanish, Portuguese, Indic): they
//   cost header octets in every part and US carriers do not use them; nor does a
//   carrier's "smart encoding" count, which would swap look-alikes such as curly
//   quotes for GSM-7 ones before sending.
//
// Splitting. A text that fits one part (160 septets, 70 units) is one part. A
// longer one is concatenated: each part spends 6 of its 140 octets on the header
// that reassembles it, leaving 153 septets or 67 units. Parts are filled greedily
// with whole characters: an escape sequence or a surrogate pair that does not fit
// whole starts the next part, so a part can hold 152 septets or 66 units. A
// character here is a code point (a lone surrogate is one unit): a grapheme made
// of several code points, such as an emoji with a skin tone or a letter with a
// combining accent, can be split between them.

const GSM7_BASIC =
  '@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !"#¤%&\'()*+,-./0123456789:;<=>?' +
  '¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà';
const GSM7_EXTENSION = '^{}\\[~]|€\f';

const septets = new Map<string, number>([
  ...[...GSM7_BASIC].map((ch) => [ch, 1] as const),
  ...[...GSM7_EXTENSION].map((ch) => [ch, 2] as const),
]);

const LIMITS = {
  'GSM-7': { single: 160, perPart: 153 },
  'UCS-2': { single: 70, perPart: 67 },
} as const;

export type TextEncoding = keyof typeof LIMITS;
export type Encoding = TextEncoding | 'MMS';

/** A text as a carrier splits it: the parts, in order, concatenate back to the text. */
export interface Split {
  encoding: TextEncoding;
  parts: string[];
}

export function splitSms(text: string): Split {
  const gsm7 = [...text].map((ch) => ({ ch, size: septets.get(ch) }));
  if (gsm7.every((c): c is Sized => c.size !== undefined)) return split(text, 'GSM-7', gsm7);
  return split(
    text,
    'UCS-2',
    [...text].map((ch) => ({ ch, size: ch.length })),
  );
}

interface Sized {
  ch: string;
  size: number;
}

function split(text: string, encoding: TextEncoding, chars: Sized[]): Split {
  const { single, perPart } = LIMITS[encoding];
  if (chars.reduce((total, c) => total + c.size, 0) <= single) return { encoding, parts: [text] };
  const parts: string[] = [];
  let part = '';
  let used = 0;
  for (const { ch, size } of chars) {
    if (used + size > perPart) {
      parts.push(part);
      part = '';
      used = 0;
    }
    part += ch;
    used += size;
  }
  parts.push(part);
  return { encoding, parts };
}

export function segmentsOf(
  body: string | null,
  mediaUrls: readonly string[] = [],
): { encoding: Encoding; segments: number } {
  if (mediaUrls.length > 0) return { encoding: 'MMS', segments: 1 };
  const { encoding, parts } = splitSms(body ?? '');
  return { encoding, segments: parts.length };
}
