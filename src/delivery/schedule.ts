// Scheduling delivery attempts as jobs, on the caller's transaction: the first
// attempt of each new delivery the relay does not take (emit) and a redelivery a
// customer asked for. A first attempt to a healthy endpoint is the relay's: its
// row is the work (delivery/relay.ts), and it has no job unless the relay moves it
// to a lane. An endpoint that is failing gets one serial lane, so a hanging
// endpoint holds one worker slot at a time.

import type { Tx } from '../db/tx.js';
import { enqueueMany } from '../jobs/enqueue.js';
import { jobKeys, lanes } from '../jobs/keys.js';
import type { AttemptTrigger, DeliveryToSchedule } from './deliveries.sql.js';

export function scheduleDeliveries(
  tx: Tx,
  deliveries: readonly DeliveryToSchedule[],
  trigger: Exclude<AttemptTrigger, 'recover'>,
): Promise<void> {
  return enqueueMany(
    tx,
    'delivery.attempt',
    deliveries
      .filter((d) => !d.relayed)
      .map((d) => {
        const lane = d.endpoint_failing ? lanes.endpoint(d.endpoint_id) : undefined;
        return {
          payload: { deliveryId: d.id, trigger, ...(lane ? { lane } : {}) },
          opts: {
            // A redelivery is a job of its own, so a pending delivery's scheduled retry is neither replaced nor hurried.
            jobKey: trigger === 'redeliver' ? jobKeys.redelivery(d.id) : jobKeys.delivery(d.id),
            queueName: lane ?? null,
          },
        };
      }),
  );
}
