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
  endpointRotateSecret,
  endpointUpdate,
} from '../../src/delivery/endpoints.sql.js';
import type { Tx } from '../../src/db/tx.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import {
  account,
  allBut,
  delivery,
  endpoint,
  ENDPOINT_STATES,
  inRolledBackTx,
  later,
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
        expect(await endpointDisable(tx, e.id, 'consecutive_failures', later(1))).toBe(true);
        const disabled = await reread(tx, 'webhook_endpoints', e);
        expect(disabled).toEqual({
          ...e,
          enabled: false,
          disabled_reason: 'consecutive_failures',
          disabled_at: later(1),
          updated_at: later(1),
          sequence: e.sequence + 1,
        });
        expect(await endpointDisable(tx, e.id, 'gone', later(2))).toBe(false);
        expect(await reread(tx, 'webhook_endpoints', e)).toEqual(disabled);
      }),
  );

  it('a disabled or deleted endpoint is left as it was', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const state of ['disabled', 'deleted'] as const) {
        const e = await endpoint(tx, { state });
        expect(await endpointDisable(tx, e.id, 'gone', later(1)), state).toBe(false);
        expect(await reread(tx, 'webhook_endpoints', e), state).toEqual(e);
      }
    }));
});

describe('endpointDelete: an endpoint is deleted once, by its own account', () => {
  it('an endpoint is deleted once; a second delete finds it gone', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const e = await endpoint(tx);
      expect(await endpointDelete(tx, e.account_id, e.id)).toBe(true);
      const deleted = await reread(tx, 'webhook_endpoints', e);
      expect(deleted).toMatchObject({ enabled: false, deleted_at: expect.any(Date) });
      expect(await endpointDelete(tx, e.account_id, e.id)).toBe(false);
      expect(await reread(tx, 'webhook_endpoints', e)).toEqual(deleted);
    }));

  it('another account cannot delete it, and a deleted one stays as it was', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const e = await endpoint(tx);
      expect(await endpointDelete(tx, (await account(tx)).id, e.id)).toBe(false);
      expect(await reread(tx, 'webhook_endpoints', e)).toEqual(e);
      const gone = await endpoint(tx, { state: 'deleted' });
      expect(await endpointDelete(tx, gone.account_id, gone.id)).toBe(false);
      expect(await reread(tx, 'webhook_endpoints', gone)).toEqual(gone);
    }));
});

describe('endpointUpdate and endpointRotateSecret: only a live endpoint of the account changes', () => {
  it('re-enabling a disabled endpoint resets its failures and forgets why', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const e = await endpoint(tx, { state: 'disabled' });
      expect(await endpointUpdate(tx, e.account_id, e.id, { enabled: true })).toMatchObject({
        enabled: true,
        consecutive_failures: 0,
        disabled_reason: null,
        disabled_at: null,
      });
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
        expect(await endpointUpdate(tx, accountId, e.id, { enabled: true, url: 'https://x.example/' })).toBeNull();
        expect(await endpointRotateSecret(tx, accountId, e.id, 'whsec_bmV3', later(86_400))).toBeNull();
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
        expect(await reread(tx, 'webhook_endpoints', e), state).toEqual({ ...e, consecutive_failures: 0 });
        const reset = await version(tx, e.id);
        expect(reset !== before, `${state}: written`).toBe(e.consecutive_failures !== 0);
        await endpointRecordSuccess(tx, e.id);
        expect(await version(tx, e.id), `${state}: written again`).toBe(reset);
      }
    }));
});
