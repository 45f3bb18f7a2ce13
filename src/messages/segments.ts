// SMS segments, computed when a message is created. GSM-7 when every character
// is in the GSM 03.38 alphabet (160 in one segment, 153 per part of a longer one;
// the extension characters ^{}\[~]|€ and form feed take two septets); otherwise
// UCS-2 counted in UTF-16 code units (70, then 67 per part). Any media makes it
// one MMS.

const GSM7_BASIC =
  '@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !"#¤%&\'()*+,-./0123456789:;<=>?' +
  '¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà';
const GSM7_EXTENSION = '^{}\\[~]|€\f';

const basic = new Set(GSM7_BASIC);
const extension = new Set(GSM7_EXTENSION);

export type Encoding = 'GSM-7' | 'UCS-2' | 'MMS';

export function segmentsOf(body: string | null, mediaUrls: readonly string[] = []): { encoding: Encoding; segments: number } {
  if (mediaUrls.length > 0) return { encoding: 'MMS', segments: 1 };
  const text = body ?? '';
  let septets = 0;
  for (const ch of text) {
    if (basic.has(ch)) septets += 1;
    else if (extension.has(ch)) septets += 2;
    else return { encoding: 'UCS-2', segments: parts(text.length, 70, 67) };
  }
  return { encoding: 'GSM-7', segments: parts(septets, 160, 153) };
}

function parts(units: number, single: number, perPart: number): number {
  return units <= single ? 1 : Math.ceil(units / perPart);
}
