// The delivery slots' shares: an endpoint earns more by answering fast and loses
// it with its first slow or failed answer, and never takes its account's last slot;
// accounts that may hang share one account's worth of the pool, so an account with
// nothing in flight, or an endpoint that answers fast, still finds a slot.

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

describe('delivery capacity across accounts (a pool of 32, shares of 16)', () => {
  /** `n` attempts of `account`, each to an endpoint of its own not heard from yet; how many got a slot. */
  const hang = (c: Capacity, account: string, n: number) =>
    Array.from({ length: n }, (_, i) => c.take(account, `${account}_ep${i}`)).filter((r) => r !== null).length;

  it('one account that may hang has its share (its first slot and 15 of the general pool); the accounts after it their first slot and what is left of that pool', () => {
    const c = new Capacity(16, 32);
    expect(hang(c, 'acct_1', 40)).toBe(16);
    expect(hang(c, 'acct_2', 40)).toBe(2);
    for (let a = 3; a <= 5; a++) expect(hang(c, `acct_${a}`, 40), `acct_${a}`).toBe(1);
    // 21 held, 11 free: an account with nothing in flight finds one
    expect(c.free()).toBe(11);
    expect(c.full('acct_quiet', 'ep_quiet')).toBeNull();
  });

  it('an account with nothing in flight finds a slot while fewer than 16 accounts hang, however they came', () => {
    const c = new Capacity(16, 32);
    let accounts = 0;
    while (c.free() > 0) hang(c, `acct_${accounts++}`, 40);
    // the general pool (16) and a first slot each: the 16th hanging account takes the last
    expect(accounts).toBe(16);
  });

  it('accounts in the general pool at once each have their fair part of it', () => {
    const c = new Capacity(16, 32);
    // each takes its first slot, then they grow in turns
    for (let round = 0; round < 20; round++) {
      for (const a of ['acct_a', 'acct_b']) c.take(a, `${a}_ep${round}`);
    }
    expect(c.room().accounts.map((a, i) => [a, c.room().accountRooms[i]])).toEqual([
      ['acct_a', 0],
      ['acct_b', 0],
    ]);
    // 1 + 8 each: the pool's 16 split in two
    expect(hang(c, 'acct_a', 1)).toBe(0);
    expect(32 - c.free()).toBe(18);
  });

  it('an endpoint that answers fast takes any free slot; one that may hang, only the general pool beyond its account’s first', () => {
    const c = new Capacity(16, 32);
    hang(c, 'acct_noisy', 40);
    hang(c, 'acct_noisy_2', 40); // the general pool is full
    c.note('ep_fast', FAST_MS - 1, true, 'acct_quiet');
    expect(Array.from({ length: 10 }, () => c.take('acct_quiet', 'ep_fast')).filter(Boolean)).toHaveLength(10);
    expect(c.free()).toBe(4);
    expect(c.full('acct_quiet', 'ep_slow')).toBe('account'); // beyond its account's first slot: the general pool's
    // for a claim: a fast account's room is the free slots (within its share), a noisy one's none, an idle one's one
    const room = c.room();
    expect(room.accountRooms[room.accounts.indexOf('acct_quiet')]).toBe(4);
    expect(room.accountRooms[room.accounts.indexOf('acct_noisy')]).toBe(0);
    expect(room.perAccount).toBe(1);
  });

  it('admit plans by the same rules as take, and takes nothing', () => {
    const c = new Capacity(16, 32);
    const items = [
      ...Array.from({ length: 20 }, (_, i) => ({ accountId: 'acct_a', endpointId: `a${i}` })),
      ...Array.from({ length: 20 }, (_, i) => ({ accountId: 'acct_b', endpointId: `b${i}` })),
    ];
    const [admitted] = c.admit(items, 50);
    expect(admitted.filter((i) => i.accountId === 'acct_a')).toHaveLength(16);
    expect(admitted.filter((i) => i.accountId === 'acct_b')).toHaveLength(2);
    expect(c.free()).toBe(32);
  });

  it('a released slot wakes whoever asked', () => {
    const c = new Capacity(16, 32);
    let woken = 0;
    const unsubscribe = c.onRelease(() => woken++);
    c.take('acct', 'ep')!();
    unsubscribe();
    c.take('acct', 'ep')!();
    expect(woken).toBe(1);
  });
});
