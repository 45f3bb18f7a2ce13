// The simulated carrier splits texts by the same rule as Handset: the `parts` of its
// send answer, its delivery receipts and its inbound SMS webhooks count an escape or a
// surrogate pair at a part boundary whole, in the next part.

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { startReceiver, telnyx, type Receiver } from '../sim/receiver.js';

const FROM = '+13125550001';
const ESCAPE_AT_BOUNDARY = 'a'.repeat(152) + '{' + 'a'.repeat(152);
const PAIR_AT_BOUNDARY = 'ж'.repeat(66) + '😀' + 'ж'.repeat(66);

let sim: Simulator;
let rx: Receiver;

beforeAll(async () => {
  rx = await startReceiver();
  sim = await startSimulator({ webhookUrl: rx.url, timeScale: 0.001, seed: 'segments' });
});
afterEach(async () => {
  await sim.idle();
  sim.reset();
  rx.received.length = 0;
});
afterAll(async () => {
  await sim.close();
  await rx.close();
});

describe('the simulator counts parts as Handset does', () => {
  it.each([
    ['an escape', ESCAPE_AT_BOUNDARY, 'GSM-7'],
    ['a surrogate pair', PAIR_AT_BOUNDARY, 'UCS-2'],
  ])('%s at a part boundary makes a sent SMS 3 parts, in the answer and every receipt', async (_, text, encoding) => {
    const sent = await telnyx(sim, 'POST', '/messages', { from: FROM, to: '+15555550100', text });
    expect(sent.json.data).toMatchObject({ encoding, parts: 3, cost: { amount: '0.0153' } });
    await sim.idle();
    const receipts = rx.received.filter((r) => r.json.data.payload.id === sent.json.data.id);
    expect(receipts.map((r) => r.json.data.event_type)).toEqual(expect.arrayContaining(['message.finalized']));
    for (const r of receipts) expect(r.json.data.payload).toMatchObject({ encoding, parts: 3 });
  });

  it.each([
    ['an escape', ESCAPE_AT_BOUNDARY, 'GSM-7'],
    ['a surrogate pair', PAIR_AT_BOUNDARY, 'UCS-2'],
  ])('%s at a part boundary makes an inbound SMS 3 parts', async (_, text, encoding) => {
    sim.injectInboundSms({ from: '+13125550009', to: FROM, text });
    await sim.idle();
    expect(rx.ofType('message.received').map((r) => r.json.data.payload)).toEqual([
      expect.objectContaining({ text, encoding, parts: 3 }),
    ]);
  });
});
