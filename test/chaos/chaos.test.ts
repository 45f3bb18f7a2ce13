// The short chaos run (npm run chaos is the long one): two ingest processes and
// two worker processes against one database, a campaign created through the batch
// API beside single messages and calls, workers SIGKILLed and restarted at random,
// every database connection cut now and then, a carrier that duplicates, re-sends
// under new ids, contradicts itself, answers early, loses webhooks for good and
// holds others back. At the end: no process exited on its own, the audit
// is clean and the customer events are exactly what a well-behaved carrier would
// have produced.

import { describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { CHAOS_DEFAULTS, chaosTable, formatAuditReport, runChaos } from '../../src/tools/chaos/chaos.js';
import { createLogger } from '../../src/telemetry/log.js';

describe('chaos', () => {
  it('a storm through a misbehaving carrier, with workers SIGKILLed and the database cut at random, leaves no exit, 0 violations and the well-behaved counts', async () => {
    const lines: string[] = [];
    const result = await runChaos({
      ...CHAOS_DEFAULTS,
      outboundMessages: 36,
      inboundMessages: 12,
      outboundCalls: 9,
      inboundCalls: 4,
      twilioMessages: 12,
      failoverMessages: 18,
      campaignMessages: 40,
      flapEveryMs: [1500, 3000],
      flapDownMs: [300, 1000],
      twilioBehaviour: { ...CHAOS_DEFAULTS.twilioBehaviour, holdMinMs: 2000, holdMaxMs: 6000 },
      workers: 2,
      ingestProcesses: 2,
      killEveryMs: [1000, 2500],
      dbCutEveryMs: [2000, 4000],
      dbCutMs: [500, 3000],
      behaviour: { ...CHAOS_DEFAULTS.behaviour, holdMinMs: 2000, holdMaxMs: 6000 },
      loadMs: 8000,
      // 30 s: twice the longest this storm holds a recording's start back (answers held 6 s, cuts of 3 s, kills).
      recordedTalkMs: 600_000,
      seed: `test-${Date.now()}`,
      databaseUrl: inject('adminUrl'),
      log: createLogger('silent'),
      out: (l) => lines.push(l),
    });
    const report = `${chaosTable(result)}\n${formatAuditReport(result.audit)}\n${result.mismatches.join('\n')}`;
    expect(result.audit.ok, report).toBe(true);
    expect(result.mismatches, report).toEqual([]);
    expect(result.workersKilled, report).toBeGreaterThan(0);
    expect(result.unexpectedExits, report).toBe(0);
    expect(result.dbCuts.count, report).toBeGreaterThan(0);
    expect(result.carrier.duplicates + result.carrier.resends, report).toBeGreaterThan(0);
    expect(result.deliveries.succeeded, report).toBe(result.deliveries.total);
    // Two carriers: every outbound message accepted by one at most, a share failed over while Telnyx was down.
    expect(result.failover.acceptedBy.twice, report).toBe(0);
    expect(result.failover.telnyxDownWindows, report).toBeGreaterThan(0);
    expect(result.twilio.sends, report).toBeGreaterThan(0);
    expect(result.customerEvents, report).toBe(result.deliveries.total);
    // The campaign through the batch API: every message stored once; each the carrier took, taken once.
    expect(result.campaign.messages, report).toBe(40);
    expect(result.campaign.sentOnce, report).toBeGreaterThan(0);
    // Every recorded call: one recording started at the carrier, stored, and transcribed once. (A run
    // whose recorded calls all fell in Telnyx's down windows, missed and never dialed, has none to count.)
    expect(result.recordings.calls + result.failover.callsMissedWhileDown, report).toBeGreaterThan(0);
    expect(result.recordings, report).toEqual({
      calls: result.recordings.calls,
      startsAtCarrier: result.recordings.calls,
      stored: result.recordings.calls,
      transcripts: result.recordings.calls,
    });
  }, 240_000);

  it('a message whose every receipt the carrier loses is compared only after the carrier was asked about it', async () => {
    // No storm: six messages, one per persona, every message.finalized lost for
    // good, so each terminal status can only come from asking the carrier, which
    // happens once HANDSET_RECONCILE_MESSAGE_AFTER has passed since the send. The
    // run ends within that bound of the last send unless settling waits for it.
    const lines: string[] = [];
    const result = await runChaos({
      ...CHAOS_DEFAULTS,
      outboundMessages: 6,
      inboundMessages: 0,
      outboundCalls: 0,
      inboundCalls: 0,
      twilioMessages: 0,
      failoverMessages: 0,
      campaignMessages: 0,
      flapEveryMs: [0, 0],
      workers: 1,
      ingestProcesses: 0,
      killEveryMs: [0, 0],
      dbCutEveryMs: [0, 0],
      behaviour: {
        ...CHAOS_DEFAULTS.behaviour,
        duplicateRate: 0,
        resendNewIdRate: 0,
        contradictionRate: 0,
        earlyReceiptRate: 0,
        holdRate: 0,
        dropRates: { 'message.finalized': 1 },
      },
      loadMs: 500,
      seed: `test-lost-${Date.now()}`,
      databaseUrl: inject('adminUrl'),
      log: createLogger('silent'),
      out: (l) => lines.push(l),
    });
    const report = `${chaosTable(result)}\n${lines.join('\n')}\n${result.mismatches.join('\n')}`;
    expect(result.carrier.dropped, report).toBeGreaterThan(0);
    expect(result.mismatches, report).toEqual([]);
    expect(result.audit.ok, report).toBe(true);
  }, 120_000);
});
