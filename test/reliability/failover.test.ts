// PostgreSQL failover under load, short (npm run chaos -- --failover is the long
// one): a primary and a synchronous streaming standby, the roles behind a TCP
// proxy, a storm of inbound SMS, sends with receipts and calls; the primary's
// host SIGKILLed mid-storm, the standby promoted, the proxy switched. Every event
// the carrier was answered 200 for is on the new primary exactly once, every
// message and call reaches its end, the audit (one customer event per transition,
// billed once) is clean, and no Handset process exits or leaves a rejection unhandled.

import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/telemetry/log.js';
import { FAILOVER_DEFAULTS, failoverTable, runFailover } from '../../src/tools/chaos/failover.js';
import { formatAuditReport } from '../../src/tools/chaos/chaos.js';

describe('failover to a synchronous standby', () => {
  it('the primary killed mid-storm and the standby promoted: every event answered 200 is there once, everything ends, audit clean, no process exits', async () => {
    const lines: string[] = [];
    const r = await runFailover({
      ...FAILOVER_DEFAULTS,
      mode: 'sync',
      outboundMessages: 20,
      inboundMessages: 20,
      outboundCalls: 4,
      inboundCalls: 3,
      workers: 1,
      loadMs: 4000,
      seed: `test-${Date.now()}`,
      log: createLogger('silent'),
      out: (l) => lines.push(l),
    });
    const report = `${lines.join('\n')}\n${failoverTable([r])}\n${formatAuditReport(r.audit)}`;
    expect(r.acknowledged, report).toBeGreaterThan(0);
    expect(r.lost, report).toBe(0);
    expect(r.apiCreatesLost, report).toBe(0);
    expect(r.storedTwice, report).toBe(0);
    expect(r.unfinished, report).toBe(0);
    expect(r.audit.ok, report).toBe(true);
    expect(r.unexpectedExits, report).toEqual([]);
    expect(r.unhandledRejections, report).toBe(0);
    // Work resumed on the new primary within the workers' crash-recovery bound from the switch.
    expect(r.timings.first200, report).not.toBeNull();
    expect(r.timings.firstProcessed! - r.timings.switched, report).toBeLessThanOrEqual(r.resumeBoundMs);
    expect(r.locksReleasedAfterMs, report).not.toBeNull();
  }, 120_000);
});
