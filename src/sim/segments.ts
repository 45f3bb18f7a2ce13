// How the simulated carrier splits a text into parts and prices it, the numbers it
// reports as `encoding`, `parts` and `cost` in the send response and receipts.
// GSM-7 when every character is in the GSM 03.38 alphabet (the extension
// characters take two septets), else UCS-2 counted in UTF-16 code units.

const GSM_BASIC = new Set(
  '@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !"#¤%&\'()*+,-./0123456789:;<=>?¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà',
);
const GSM_EXTENSION = new Set('^{}\\[~]|€\f');

export type Encoding = 'GSM-7' | 'UCS-2';

export interface Segments {
  encoding: Encoding;
  parts: number;
}

export function segmentsOf(text: string, isMms: boolean): Segments {
  let septets = 0;
  let gsm = true;
  for (const ch of text) {
    if (GSM_BASIC.has(ch)) septets += 1;
    else if (GSM_EXTENSION.has(ch)) septets += 2;
    else {
      gsm = false;
      break;
    }
  }
  if (isMms) return { encoding: gsm ? 'GSM-7' : 'UCS-2', parts: 1 };
  if (gsm) return { encoding: 'GSM-7', parts: septets <= 160 ? 1 : Math.ceil(septets / 153) };
  const units = text.length; // UTF-16 code units
  return { encoding: 'UCS-2', parts: units <= 70 ? 1 : Math.ceil(units / 67) };
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
