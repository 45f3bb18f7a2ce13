// The guards of webhook deliveries and endpoints, each on its own: a transition
// applies once, a second try finds nothing to do, and every state it does not
// start from refuses it and leaves the row as it was. Rows come from the factory,
// in a transaction rolled back after each test.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DELIVERY_STATUSES,
  deliveryFinish,
  deliveryMarkRedelivered,
  deliveryScheduleRetry,
  deliverySkipForEndpoint,
  deliverySkipPending,
} from '../../src/delivery/deliveries.sql.js';
import {
  endpointDelete,
  endpointDisable,
  endpointRecordSuccess,
  endpointEnable,
  endpointTouch,
  endpointUpdate,
} from '../../src/delivery/endpoints.sql.js';
import type { Tx } from '../../src/db/tx.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import { onOneConnection, onStatisticsOfNow } from '../support/plan.js';
import {
  account,
  allBut,
  delivery,
  endpoint,
  ENDPOINT_STATES,
  inRolledBackTx,
  later,
  racing,
  reread,
} from '../support/factory.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db.drop();
});

describe('deliveryFinish: pending → succeeded | failed | skipped, once', () => {
  it.each(allBut(DELIVERY_STATUSES, 'pending'))('a pending delivery ends %s once; a second end finds it ended', (to) =>
    inRolledBackTx(db.pool, async (tx) => {
      const d = await delivery(tx, { status: 'pending' });
      expect(await deliveryFinish(tx, d.id, to)).toBe(true);
      const ended = await reread(tx, 'webhook_deliveries', d);
      expect(ended).toEqual({ ...d, status: to, next_attempt_at: null });
      expect(await deliveryFinish(tx, d.id, to === 'succeeded' ? 'failed' : 'succeeded')).toBe(false);
      expect(await reread(tx, 'webhook_deliveries', d)).toEqual(ended);
    }),
  );

  it('a delivery that has ended is not ended again', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(DELIVERY_STATUSES, 'pending')) {
        const d = await delivery(tx, { status });
        expect(await deliveryFinish(tx, d.id, 'succeeded'), status).toBe(false);
        expect(await reread(tx, 'webhook_deliveries', d), status).toEqual(d);
      }
    }));
});

describe('deliverySkipForEndpoint: pending → skipped when its endpoint is disabled or deleted', () => {
  it.each(['disabled', 'deleted'] as const)('a pending delivery to a %s endpoint is skipped once', (state) =>
    inRolledBackTx(db.pool, async (tx) => {
      const e = await endpoint(tx, { state });
      const d = await delivery(tx, { endpoint_id: e.id, status: 'pending' });
      expect(await deliverySkipForEndpoint(tx, d.id)).toBe(true);
      const skipped = await reread(tx, 'webhook_deliveries', d);
      expect(skipped).toMatchObject({ status: 'skipped', next_attempt_at: null });
      expect(await deliverySkipForEndpoint(tx, d.id)).toBe(false);
      expect(await reread(tx, 'webhook_deliveries', d)).toEqual(skipped);
    }),
  );

  it('a delivery to an endpoint still enabled, even failing, is not skipped', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const state of allBut(ENDPOINT_STATES, 'disabled', 'deleted')) {
        const d = await delivery(tx, { endpoint_id: (await endpoint(tx, { state })).id, status: 'pending' });
        expect(await deliverySkipForEndpoint(tx, d.id), state).toBe(false);
        expect(await reread(tx, 'webhook_deliveries', d), state).toEqual(d);
      }
    }));

  it('a delivery that has ended is not skipped', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const e = await endpoint(tx, { state: 'disabled' });
      for (const status of allBut(DELIVERY_STATUSES, 'pending')) {
        const d = await delivery(tx, { endpoint_id: e.id, status });
        expect(await deliverySkipForEndpoint(tx, d.id), status).toBe(false);
        expect(await reread(tx, 'webhook_deliveries', d), status).toEqual(d);
      }
    }));
});

describe('deliveryScheduleRetry: only a pending delivery gets a next attempt', () => {
  it('a pending delivery takes each retry time it is given', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const d = await delivery(tx, { status: 'pending' });
      expect(await deliveryScheduleRetry(tx, d.id, later(5))).toBe(true);
      expect(await deliveryScheduleRetry(tx, d.id, later(300))).toBe(true);
      expect((await reread(tx, 'webhook_deliveries', d)).next_attempt_at).toEqual(later(300));
    }));

  it('a delivery that has ended gets no retry', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(DELIVERY_STATUSES, 'pending')) {
        const d = await delivery(tx, { status });
        expect(await deliveryScheduleRetry(tx, d.id, later(5)), status).toBe(false);
        expect(await reread(tx, 'webhook_deliveries', d), status).toEqual(d);
      }
    }));
});

describe('deliverySkipPending: a disabled endpoint’s pending deliveries stop', () => {
  it('each pending delivery of the endpoint is skipped once; the others are left as they were', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const e = await endpoint(tx, { state: 'disabled' });
      const ds = [];
      for (const status of DELIVERY_STATUSES) ds.push(await delivery(tx, { endpoint_id: e.id, status }));
      const elsewhere = await delivery(tx, { status: 'pending' });
      expect(await deliverySkipPending(tx, e.id)).toBe(1);
      expect(await deliverySkipPending(tx, e.id)).toBe(0);
      for (const d of ds) {
        const now = await reread(tx, 'webhook_deliveries', d);
        if (d.status === 'pending') expect(now).toMatchObject({ status: 'skipped', next_attempt_at: null });
        else expect(now, d.status).toEqual(d);
      }
      expect(await reread(tx, 'webhook_deliveries', elsewhere)).toEqual(elsewhere);
    }));
});

describe('a delivery’s transition between transactions: it judges the row as it is once locked', () => {
  it.each([
    ['deliveryFinish', (tx: Tx, id: string) => deliveryFinish(tx, id, 'succeeded')],
    ['deliveryScheduleRetry', (tx: Tx, id: string) => deliveryScheduleRetry(tx, id, later(60))],
    ['deliverySkipForEndpoint', (tx: Tx, id: string) => deliverySkipForEndpoint(tx, id)],
  ])('%s that waited for a commit finishing the delivery finds it finished and changes nothing', async (_, second) => {
    const target = await endpoint(db.pool as unknown as Tx, { state: 'disabled' });
    const d = await delivery(db.pool as unknown as Tx, { endpoint_id: target.id });
    const [finished, changed] = await racing(
      db.pool,
      (tx) => deliveryFinish(tx, d.id, 'failed'),
      (tx) => second(tx, d.id),
    );
    expect([finished, changed]).toEqual([true, false]);
    const after = await reread(db.pool as unknown as Tx, 'webhook_deliveries', d);
    expect({ status: after.status, next_attempt_at: after.next_attempt_at }).toEqual({
      status: 'failed',
      next_attempt_at: null,
    });
  });
});

describe('a delivery’s transition reads its own delivery, not the pending backlog', () => {
  /** `n` pending deliveries of `endpointId` (of `accountId`), each of an event of its own; their ids. */
  const pendingDeliveries = async (accountId: string, endpointId: string, n: number): Promise<string[]> => {
    const { rows } = await db.pool.query<{ id: string }>(
      `WITH e AS (
         INSERT INTO outbound_events (account_id, type, subject_id, data, occurred_at)
         SELECT $1, 'message.sent', 'msg_backlog_' || i, '{}', now() FROM generate_series(1, $3) i RETURNING id
       )
       INSERT INTO webhook_deliveries (event_id, endpoint_id, status) SELECT id, $2, 'pending' FROM e RETURNING id`,
      [accountId, endpointId, n],
    );
    return rows.map((r) => r.id);
  };

  // The connection runs the statement from its first moments, on statistics taken
  // when nothing was pending; then an endpoint's backlog of 2,000 builds up.
  it.each([
    ['deliveryFinish', (tx: Tx, id: string) => deliveryFinish(tx, id, 'failed')],
    ['deliveryScheduleRetry', (tx: Tx, id: string) => deliveryScheduleRetry(tx, id, later(60))],
    ['deliverySkipForEndpoint', (tx: Tx, id: string) => deliverySkipForEndpoint(tx, id)],
  ])('%s with 2,000 pending reads its own delivery', async (_, apply) => {
    const owner = await account(db.pool as unknown as Tx);
    const target = await endpoint(db.pool as unknown as Tx, { account_id: owner.id, state: 'disabled' });
    await pendingDeliveries(owner.id, target.id, 20);
    await db.pool.query(`UPDATE webhook_deliveries SET status = 'succeeded' WHERE endpoint_id = $1`, [target.id]);
    const read = await onStatisticsOfNow(db.pool, 'webhook_deliveries', () =>
      onOneConnection(db.pool, async (client, watch) => {
        for (const id of await pendingDeliveries(owner.id, target.id, 10)) await apply(client as unknown as Tx, id);
        const [last] = await pendingDeliveries(owner.id, target.id, 2_000);
        return watch('webhook_deliveries', () => apply(client as unknown as Tx, last!));
      }),
    ).finally(() => db.pool.query('DELETE FROM webhook_deliveries WHERE endpoint_id = $1', [target.id]));
    expect(read).toBeGreaterThan(0);
    expect(read).toBeLessThan(10);
  });
});

describe('deliveryMarkRedelivered: a redelivery’s 2xx makes the delivery succeeded, whatever it was', () => {
  it.each(allBut(DELIVERY_STATUSES, 'succeeded'))('a %s delivery succeeds once; a second 2xx finds it done', (from) =>
    inRolledBackTx(db.pool, async (tx) => {
      const d = await delivery(tx, { status: from });
      expect(await deliveryMarkRedelivered(tx, d.id)).toBe(true);
      const done = await reread(tx, 'webhook_deliveries', d);
      expect(done).toMatchObject({ status: 'succeeded', next_attempt_at: null });
      expect(await deliveryMarkRedelivered(tx, d.id)).toBe(false);
      expect(await reread(tx, 'webhook_deliveries', d)).toEqual(done);
    }),
  );

  it('a succeeded delivery is left as it was', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const d = await delivery(tx, { status: 'succeeded' });
      expect(await deliveryMarkRedelivered(tx, d.id)).toBe(false);
      expect(await reread(tx, 'webhook_deliveries', d)).toEqual(d);
    }));
});

describe('endpointDisable: enabled → disabled, once', () => {
  it.each(allBut(ENDPOINT_STATES, 'disabled', 'deleted'))(
    'an endpoint still %s is disabled once; the second caller finds it disabled',
    (state) =>
      inRolledBackTx(db.pool, async (tx) => {
        const e = await endpoint(tx, { state });
        const returned = await endpointDisable(tx, e.id, 'consecutive_failures', later(1));
        const disabled = await reread(tx, 'webhook_endpoints', e);
        expect(returned).toEqual(disabled);
        expect(disabled).toEqual({
          ...e,
          enabled: false,
          disabled_reason: 'consecutive_failures',
          disabled_at: later(1),
          updated_at: later(1),
          sequence: e.sequence + 1,
        });
        expect(await endpointDisable(tx, e.id, 'gone', later(2))).toBeNull();
        expect(await reread(tx, 'webhook_endpoints', e)).toEqual(disabled);
      }),
  );

  it('a disabled or deleted endpoint is left as it was', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const state of ['disabled', 'deleted'] as const) {
        const e = await endpoint(tx, { state });
        expect(await endpointDisable(tx, e.id, 'gone', later(1)), state).toBeNull();
        expect(await reread(tx, 'webhook_endpoints', e), state).toEqual(e);
      }
    }));
});

describe('endpointDelete: an endpoint is deleted once, by its own account', () => {
  it('an endpoint is deleted once; a second delete finds it gone', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const e = await endpoint(tx);
      const returned = await endpointDelete(tx, e.account_id, e.id, later(1));
      const deleted = await reread(tx, 'webhook_endpoints', e);
      expect(returned).toEqual(deleted);
      expect(deleted).toMatchObject({ enabled: false, deleted_at: later(1), sequence: e.sequence + 1 });
      expect(await endpointDelete(tx, e.account_id, e.id, later(2))).toBeNull();
      expect(await reread(tx, 'webhook_endpoints', e)).toEqual(deleted);
    }));

  it('another account cannot delete it, and a deleted one stays as it was', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const e = await endpoint(tx);
      expect(await endpointDelete(tx, (await account(tx)).id, e.id, later(1))).toBeNull();
      expect(await reread(tx, 'webhook_endpoints', e)).toEqual(e);
      const gone = await endpoint(tx, { state: 'deleted' });
      expect(await endpointDelete(tx, gone.account_id, gone.id, later(1))).toBeNull();
      expect(await reread(tx, 'webhook_endpoints', gone)).toEqual(gone);
    }));
});

describe('endpointEnable: disabled → enabled, once, with a clean bill of health', () => {
  it('a disabled endpoint is enabled once, its failures reset and why forgotten; a second enable finds it enabled', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const e = await endpoint(tx, { state: 'disabled', timing_out: true });
      const enabled = await endpointEnable(tx, e.account_id, e.id, later(1));
      expect(enabled).toEqual({
        ...e,
        enabled: true,
        consecutive_failures: 0,
        timing_out: false,
        disabled_reason: null,
        disabled_at: null,
        updated_at: later(1),
        sequence: e.sequence + 1,
      });
      expect(await endpointEnable(tx, e.account_id, e.id, later(2))).toBeNull();
      expect(await reread(tx, 'webhook_endpoints', e)).toEqual(enabled);
    }));

  it('an endpoint in any other state, or another account’s, is left as it was', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const state of allBut(ENDPOINT_STATES, 'disabled')) {
        const e = await endpoint(tx, { state });
        expect(await endpointEnable(tx, e.account_id, e.id, later(1)), state).toBeNull();
        expect(await reread(tx, 'webhook_endpoints', e), state).toEqual(e);
      }
      const theirs = await endpoint(tx, { state: 'disabled' });
      expect(await endpointEnable(tx, (await account(tx)).id, theirs.id, later(1))).toBeNull();
      expect(await reread(tx, 'webhook_endpoints', theirs)).toEqual(theirs);
    }));
});

describe('endpointUpdate and endpointTouch: only a live endpoint of the account changes', () => {
  it('an update is a change: the fields, updated_at and the sequence move', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const e = await endpoint(tx);
      const updated = await endpointUpdate(tx, e.account_id, e.id, { url: 'https://other.example/' });
      expect(updated).toMatchObject({ url: 'https://other.example/', sequence: e.sequence + 1 });
    }));

  it('a deleted endpoint, or another account’s, is neither updated nor rotated', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const other = await account(tx);
      const live = await endpoint(tx);
      const gone = await endpoint(tx, { state: 'deleted' });
      for (const [accountId, e] of [
        [other.id, live],
        [gone.account_id, gone],
      ] as const) {
        expect(await endpointUpdate(tx, accountId, e.id, { url: 'https://x.example/' })).toBeNull();
        expect(await endpointTouch(tx, accountId, e.id, later(1))).toBeNull();
        expect(await reread(tx, 'webhook_endpoints', e)).toEqual(e);
      }
    }));
});

describe('endpointRecordSuccess: a success resets the failure count, and writes only then', () => {
  // A row's ctid changes with every version an UPDATE writes, inside the transaction too.
  const version = async (tx: Tx, id: string) =>
    (await tx.query<{ v: string }>('SELECT ctid::text AS v FROM webhook_endpoints WHERE id = $1', [id])).rows[0]!.v;

  it('a count is reset once; a second success, or an endpoint with nothing to reset, writes nothing', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const state of ENDPOINT_STATES) {
        const e = await endpoint(tx, { state });
        const before = await version(tx, e.id);
        await endpointRecordSuccess(tx, e.id);
        expect(await reread(tx, 'webhook_endpoints', e), state).toEqual({
          ...e,
          consecutive_failures: 0,
          timing_out: false,
        });
        const reset = await version(tx, e.id);
        expect(reset !== before, `${state}: written`).toBe(e.consecutive_failures !== 0 || e.timing_out);
        await endpointRecordSuccess(tx, e.id);
        expect(await version(tx, e.id), `${state}: written again`).toBe(reset);
      }
    }));
});
