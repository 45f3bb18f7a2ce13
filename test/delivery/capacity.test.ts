// The delivery slots' shares: an endpoint earns more by answering fast and loses
// it with its first slow or failed answer, and never takes its account's last slot.

import { describe, expect, it } from 'vitest';
import { Capacity, FAST_MS } from '../../src/delivery/capacity.js';

const take = (c: Capacity, endpoint: string, n: number) =>
  Array.from({ length: n }, () => c.take('acct', endpoint)).filter((r) => r !== null).length;

describe('delivery capacity', () => {
  it('an endpoint not yet heard from has half its account’s share', () => {
    const c = new Capacity(6);
    expect(take(c, 'ep_new', 6)).toBe(3);
    expect(c.full('acct', 'ep_new')).toBe('endpoint');
  });

  it('a fast success earns all of the account’s share but one, leaving its other endpoints a slot', () => {
    const c = new Capacity(6);
    c.note('ep_fast', FAST_MS - 1, true);
    expect(take(c, 'ep_fast', 6)).toBe(5);
    expect(c.full('acct', 'ep_fast')).toBe('endpoint');
    expect(c.take('acct', 'ep_other')).not.toBeNull();
    expect(c.full('acct', 'ep_other')).toBe('account');
  });

  it('a slow answer or a failure puts it back to half', () => {
    for (const [ms, ok] of [
      [FAST_MS, true],
      [1, false],
    ] as const) {
      const c = new Capacity(6);
      c.note('ep', 1, true);
      expect(c.endpointShare('ep')).toBe(5);
      c.note('ep', ms, ok);
      expect(c.endpointShare('ep')).toBe(3);
    }
  });

  it('a share of one or two stays one endpoint slot whatever the answers', () => {
    for (const perAccount of [1, 2]) {
      const c = new Capacity(perAccount);
      c.note('ep', 1, true);
      expect(c.endpointShare('ep')).toBe(1);
    }
  });

  it('admit takes, in order and up to its limit, what the room left to each endpoint and account allows, and takes no slot', () => {
    const c = new Capacity(6); // 3 an endpoint, 6 an account
    c.take('acct_a', 'ep_1'); // one of ep_1's three in flight
    const items = [
      ...Array.from({ length: 4 }, (_, i) => ({ endpointId: 'ep_1', accountId: 'acct_a', n: i })),
      ...Array.from({ length: 5 }, (_, i) => ({ endpointId: 'ep_2', accountId: 'acct_a', n: 4 + i })),
      { endpointId: 'ep_3', accountId: 'acct_b', n: 9 },
    ];
    const [admitted, rest] = c.admit(items, 10);
    // ep_1: 2 more; ep_2: 3 of its own, then the account is at 6; acct_b is another account.
    expect(admitted.map((i) => i.n)).toEqual([0, 1, 4, 5, 6, 9]);
    expect(rest.map((i) => i.n)).toEqual([2, 3, 7, 8]);
    expect(c.admit(items, 2)[0].map((i) => i.n)).toEqual([0, 1]);
    expect(c.full('acct_a', 'ep_2')).toBeNull(); // admitting took nothing
  });
});
