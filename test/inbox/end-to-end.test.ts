// End to end, short (npm run chaos runs it long): Handset's real deliveries of a
// storm of message events, with retries, a redelivery and a recover, to the
// example receiver (examples/inbox-receiver) running as a process of its own,
// SIGKILLed and restarted and its connection cut on the way: its tables end as
// each event applied once.

import { describe, expect, inject, it } from 'vitest';
import { createLogger } from '../../src/telemetry/log.js';
import { INBOX_CHAOS_DEFAULTS, inboxChaosTable, runInboxChaos } from '../../src/tools/chaos/inbox.js';

describe('the example receiver behind @handset/inbox', () => {
  it('a storm with the receiver SIGKILLed, its answers cut, an outage, redeliveries and a recover: every event applied once', async () => {
    const lines: string[] = [];
    const result = await runInboxChaos({
      ...INBOX_CHAOS_DEFAULTS,
      messages: 24,
      inbound: 6,
      duringOutage: 3,
      redeliveries: 12,
      killEveryMs: [1500, 3000],
      cutEveryMs: [500, 1500],
      loadMs: 6000,
      seed: `inbox-test-${Date.now()}`,
      databaseUrl: inject('adminUrl'),
      log: createLogger('silent'),
      out: (l) => lines.push(l),
    });
    const report = `${inboxChaosTable(result)}\n${result.mismatches.join('\n')}\n${lines.join('\n')}`;
    console.info(inboxChaosTable(result));
    expect(result.mismatches, report).toEqual([]);
    expect(result.receiverKills, report).toBeGreaterThan(0);
    expect(result.recovered, report).toBeGreaterThan(0);
    expect(result.answered['200 duplicate'], report).toBeGreaterThanOrEqual(result.redelivered);
    expect(result.effects, report).toBe(result.events);
  }, 240_000);
});
