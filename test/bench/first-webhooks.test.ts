// The bench's count of customer webhooks beyond one per message tells an attempt
// sent again (the same webhook-id: at-least-once) from another event about the
// same message (a double effect), and keeps each message's first for its latency.

import { describe, expect, it } from 'vitest';
import { firstWebhooks } from '../../src/tools/bench/pipeline.js';
import type { Arrival } from '../../src/tools/bench/receiver.js';

const arrival = (eventId: string, subjectId: string, at: number, type = 'message.delivered'): Arrival => ({
  eventId,
  subjectId,
  at,
  type,
});

describe('firstWebhooks', () => {
  it('counts a webhook-id sent again apart from another event about the same message, and keeps each first', () => {
    const indexOf = new Map([
      ['msg_a', 0],
      ['msg_b', 1],
    ]);
    const { byMessage, redelivered, otherEvents } = firstWebhooks(
      [
        arrival('evt_1', 'msg_a', 10),
        arrival('evt_2', 'msg_b', 11),
        arrival('evt_1', 'msg_a', 12), // the same attempt again
        arrival('evt_3', 'msg_a', 13, 'message.failed'), // a second event: a double effect
        arrival('evt_2', 'msg_b', 14),
        arrival('evt_9', 'msg_elsewhere', 15), // not one of the bench's messages
      ],
      indexOf,
    );
    expect([...byMessage].map(([i, a]) => [i, a.eventId, a.at])).toEqual([
      [0, 'evt_1', 10],
      [1, 'evt_2', 11],
    ]);
    expect(redelivered).toBe(2);
    expect(otherEvents).toEqual(['message.failed']);
  });
});
