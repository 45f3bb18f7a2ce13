// The simulated account's numbers, as GET /v2/phone_numbers answers them: every
// number of the fictional 555 exchange but NOT_OURS (so the dev demo number and
// the tests' numbers are held), Telnyx's filter (digits only, at least three),
// changed through the control API, and forgotten by reset.

import { describe, expect, it } from 'vitest';
import { DEMO_NUMBER } from '../../src/dev/demo.js';
import { NOT_OURS } from '../../src/sim/simulator.js';
import { useSimulator } from './harness.js';

const h = useSimulator({ seed: 'inventory' });

async function list(filter?: string): Promise<{ status: number; numbers: string[] }> {
  const query =
    filter === undefined ? '' : `?${encodeURIComponent('filter[phone_number]')}=${encodeURIComponent(filter)}`;
  const res = await fetch(`${h.sim.url}/phone_numbers${query}`, {
    headers: { authorization: `Bearer ${h.sim.apiKey}` },
  });
  const json = (await res.json()) as { data?: { phone_number: string; status: string; record_type: string }[] };
  for (const n of json.data ?? []) expect(n).toMatchObject({ record_type: 'phone_number', status: 'active' });
  return { status: res.status, numbers: (json.data ?? []).map((n) => n.phone_number) };
}

describe('the inventory', () => {
  it('holds the 555 exchange, the demo number among it, but not NOT_OURS nor numbers elsewhere', async () => {
    expect(h.sim.holdsNumber(DEMO_NUMBER)).toBe(true);
    expect((await list('13125550142')).numbers).toEqual(['+13125550142']);
    expect((await list('14155550001')).numbers).toEqual(['+14155550001']);
    for (const n of NOT_OURS) expect((await list(n.slice(1))).numbers).toEqual([]);
    expect((await list('14158675309')).numbers).toEqual([]);
  });

  it("reads Telnyx's filter: digits only, at least three; with a '+' or too short it finds nothing", async () => {
    expect((await list('+13125550142')).numbers).toEqual([]);
    expect((await list('13')).numbers).toEqual([]);
    expect((await list()).status).toBe(200);
    const unauthorized = await fetch(`${h.sim.url}/phone_numbers`);
    expect(unauthorized.status).toBe(401);
  });

  it('changes through the control API, and a reset forgets the changes', async () => {
    expect((await h.control('PUT', '/numbers/+14158675309')).json).toEqual({ number: '+14158675309', held: true });
    expect((await list('14158675309')).numbers).toEqual(['+14158675309']);
    expect((await list('8675')).numbers).toEqual(['+14158675309']); // a partial filter finds the added ones
    expect((await h.control('DELETE', '/numbers/+13125550142')).json).toEqual({ number: '+13125550142', held: false });
    expect((await list('13125550142')).numbers).toEqual([]);
    expect((await h.control('GET', '/state')).json.numbers).toEqual({
      added: ['+14158675309'],
      removed: ['+13125550142'],
    });
    expect((await h.control('PUT', '/numbers/not-a-number')).status).toBe(400);
    h.sim.reset();
    expect((await list('14158675309')).numbers).toEqual([]);
    expect((await list('13125550142')).numbers).toEqual(['+13125550142']);
  });
});
