// Scheduling delivery attempts as jobs, on the caller's transaction: the first
// attempt of each new delivery (emit) and a redelivery a customer asked for.
// Deliveries to a healthy endpoint run in parallel; an endpoint that is failing
// gets one serial lane, so a hanging endpoint holds one worker slot at a time.

import type { Tx } from '../db/tx.js';
import { enqueueMany } from '../jobs/enqueue.js';
import { jobKeys, lanes } from '../jobs/keys.js';
import type { AttemptTrigger, DeliveryToSchedule } from './deliveries.sql.js';

export function scheduleDeliveries(
  tx: Tx,
  deliveries: readonly DeliveryToSchedule[],
  trigger: AttemptTrigger,
): Promise<void> {
  return enqueueMany(
    tx,
    'delivery.attempt',
    deliveries.map((d) => ({
      payload: { deliveryId: d.id, trigger },
      opts: {
        // A redelivery is a job of its own, so a pending delivery's scheduled retry is neither replaced nor hurried.
        jobKey: trigger === 'redeliver' ? jobKeys.redelivery(d.id) : jobKeys.delivery(d.id),
        queueName: d.endpoint_failing ? lanes.endpoint(d.endpoint_id) : null,
      },
    })),
  );
}
