// What a bench run produces: one JSON document with every measurement, and the
// table printed from it. Each figure sits next to the baseline it is judged
// against, measured in the same run, and the table ends with the issue's
// targets, met or not.

import { DEFAULT_DELIVERY_CONCURRENCY } from '../../config.js';
import type { LoadResult } from './http-load.js';
import type { InboxBench } from './inbox.js';
import type { CpuSplit, MachineInfo } from './machine.js';
import type { BenchOptions } from './options.js';
import type { DeliveryResult, PipelineResult, PipelineStages } from './pipeline.js';
import type { QueueFloor } from './queue.js';
import { round, type LatencySummary } from './stats.js';
import type { VerifyBench } from './verify.js';
import type { BulkResult } from './bulk.js';

export type BulkReport = BulkResult & { cpu: CpuSplit; carrierCores?: number | null };

export interface Measured extends LoadResult {
  cpu: CpuSplit;
  /** Rows the run added to carrier_events (ingest and baselines of new events). */
  stored?: number;
}

export interface IngestPoint {
  concurrency: number;
  ingest: Measured;
  A: Measured;
  B: Measured;
  A1?: Measured;
  N?: Measured;
  /** Baseline H: ingest's server with nothing stored (http-floor.ts). */
  H?: Measured;
}

export interface GrowthPoint {
  stored: number;
  fillSeconds: number;
  tableMiB: number;
  indexesMiB: number;
  ingest: Measured;
  A: Measured;
  pipeline: PipelineResult & { cpu: CpuSplit };
}

export interface ScalePoint {
  processes: number;
  result: Measured;
  /** Baseline A with as many independent writers as processes. */
  A: Measured;
}

export interface Target {
  target: string;
  value: string;
  met: boolean | null;
}

export interface BenchReport {
  startedAt: string;
  seconds: number;
  command: string;
  machine: MachineInfo;
  options: BenchOptions;
  ingest: IngestPoint[];
  /** carrierCores: the simulator's process, in "anything else" of the cores cell. */
  /** The batched dispatcher's campaign, beside the same run's old path (one job per message). */
  bulk?: BulkReport & { baseline?: BulkReport; paced?: BulkReport };
  /** CPU per Ed25519 check, by engine (the verify micro-benchmark). */
  verify?: VerifyBench;
  duplicates?: { concurrency: number; ingest: Measured; A: Measured };
  halfPeak?: { offered: number; ingest: Measured };
  queue?: QueueFloor;
  pipeline?: {
    paced: PipelineResult & { cpu: CpuSplit };
    sustained: PipelineResult & { cpu: CpuSplit };
    /** Paced at half the sustained rate of the same run: the latency of a busy day, not of a queue. */
    half?: PipelineResult & { cpu: CpuSplit };
    /** The paced run again while another account's endpoints accept connections and never answer. */
    neighbour?: PipelineResult & { cpu: CpuSplit; hangingEndpoints: number; hangingAttempts: number };
  };
  delivery: (DeliveryResult & { cpu: CpuSplit })[];
  growth: GrowthPoint[];
  scale: ScalePoint[];
  /** @handset/inbox beside the same handler without it (inbox.ts). */
  inbox?: InboxBench;
  targets: Target[];
  notes: string[];
}

// ---------------------------------------------------------------------------------

type Cell = string | number | null | undefined;

const ms = (v: number | undefined) =>
  v === undefined || !Number.isFinite(v) ? '—' : v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0);
const rate = (v: number | undefined) =>
  v === undefined || !Number.isFinite(v) ? '—' : v >= 100 ? Math.round(v).toLocaleString('en-US') : v.toFixed(1);
const ratio = (a: number, b: number) => (b > 0 ? (a / b).toFixed(2) : '—');
const cores = (v: number | null | undefined) => (v === null || v === undefined ? '?' : v.toFixed(2));

function cpuCell(cpu: CpuSplit | undefined): string {
  if (!cpu) return '';
  const handset = Object.values(cpu.roles).reduce<number | null>(
    (sum, v) => (v === null || sum === null ? null : sum + v),
    0,
  );
  // Whatever else kept the machine busy meanwhile (other processes on a shared machine).
  const other =
    cpu.machine === null || cpu.postgres === null || handset === null
      ? null
      : Math.max(0, cpu.machine - handset - cpu.postgres - cpu.client);
  return [
    Object.keys(cpu.roles).length ? cores(handset) : '-',
    cores(cpu.postgres),
    cores(cpu.client),
    cores(other),
  ].join('/');
}

/**
 * CPU microseconds the Handset processes spent per row stored (utime+stime from
 * /proc over the measurement, divided by what it stored), or null when unknown.
 */
export function cpuPerStored(m: Measured & { stored?: number }): number | null {
  const cores = Object.values(m.cpu.roles).reduce<number | null>(
    (a, c) => (a === null || c === null ? null : a + c),
    0,
  );
  if (cores === null || !m.stored) return null;
  return (cores * m.seconds * 1e6) / m.stored;
}

/** The same per request answered 200, for a process that stores nothing (baseline H). */
export function cpuPerAnswered(m: Measured): number | null {
  return cpuPerStored({ ...m, stored: m.statuses['200'] ?? 0 });
}

const micros = (v: number | null | undefined) => (v === null || v === undefined ? '-' : `${Math.round(v)} µs`);

function latencyCells(l: LatencySummary | undefined): Cell[] {
  return [ms(l?.p50), ms(l?.p99), ms(l?.p999)];
}

export function renderTable(r: BenchReport): string {
  const m = r.machine;
  const s = m.postgresSettings;
  const lines: string[] = [];
  lines.push(
    `Handset bench, ${r.startedAt.slice(0, 16).replace('T', ' ')} UTC: ${round(r.seconds, 0)} s in all, ${r.options.duration} s per measurement (${r.command})`,
  );
  lines.push(
    `machine: ${m.cpus} cores (${m.cpuModel}), ${m.memoryGiB} GiB, Node ${m.node}, ${m.postgres} (${m.database}; ` +
      `fsync ${s['fsync']}, synchronous_commit ${s['synchronous_commit']}, shared_buffers ${s['shared_buffers']})`,
  );
  lines.push('');
  const header = ['figure', 'conc', 'rate/s', 'p50 ms', 'p99 ms', 'p99.9 ms', 'vs baseline', 'cores h/pg/cl/oth'];
  const rows: Cell[][] = [];
  const add = (...cells: Cell[]) => rows.push(cells);
  const section = (title: string) => rows.push([title]);
  /** A pipeline run's three legs, under its row. */
  const addLegs = (legs: PipelineStages) => {
    for (const [label, leg] of [
      ['stored → claimed by the relay', legs.storedToClaimed],
      ['claimed → attempt sent (batch)', legs.claimedToSent],
      ['attempt sent → verified', legs.sentToVerified],
    ] as const) {
      add(`    ${label}`, '', '', ...latencyCells(leg), '', '');
    }
  };

  if (r.ingest.length) {
    section('1. ingest, unique events (pre-signed message.finalized, keep-alive)');
    for (const p of r.ingest) {
      add(
        `ingest HTTP`,
        p.concurrency,
        rate(p.ingest.rate),
        ...latencyCells(p.ingest.latency),
        [
          `A ${ratio(p.ingest.rate, p.A.rate)}`,
          p.A1 ? `A1 ${ratio(p.ingest.rate, p.A1.rate)}` : '',
          `B ${ratio(p.ingest.rate, p.B.rate)}`,
        ]
          .filter(Boolean)
          .join(', '),
        cpuCell(p.ingest.cpu),
      );
      add(
        `  ingest CPU per stored webhook`,
        p.concurrency,
        micros(cpuPerStored(p.ingest)),
        '',
        '',
        '',
        p.H ? `H ${micros(cpuPerAnswered(p.H))}` : '',
        '',
      );
      if (p.H)
        add(
          `  H: ingest's server, nothing stored`,
          p.concurrency,
          rate(p.H.rate),
          ...latencyCells(p.H.latency),
          `${micros(cpuPerAnswered(p.H))}/request`,
          cpuCell(p.H.cpu),
        );
      add(
        `  baseline A: ingest's write over pg`,
        p.concurrency,
        rate(p.A.rate),
        ...latencyCells(p.A.latency),
        p.A1 ? `A1 ${ratio(p.A.rate, p.A1.rate)}` : '',
        cpuCell(p.A.cpu),
      );
      if (p.A1)
        add(
          `  A1: same SQL, 1 event per tx`,
          p.concurrency,
          rate(p.A1.rate),
          ...latencyCells(p.A1.latency),
          `B ${ratio(p.A1.rate, p.B.rate)}`,
          cpuCell(p.A1.cpu),
        );
      add(
        `  baseline B: bare INSERT per tx`,
        p.concurrency,
        rate(p.B.rate),
        ...latencyCells(p.B.latency),
        '',
        cpuCell(p.B.cpu),
      );
      if (p.N)
        add(
          `  INSERT + pg_notify per tx`,
          p.concurrency,
          rate(p.N.rate),
          ...latencyCells(p.N.latency),
          `B ${ratio(p.N.rate, p.B.rate)}`,
          cpuCell(p.N.cpu),
        );
    }
    if (r.verify) {
      const v = r.verify.micros;
      add(
        `  verify micro-benchmark (${r.verify.bodyBytes}-byte body)`,
        1,
        `libsodium ${micros(v.libsodium)}`,
        '',
        '',
        '',
        `node:crypto ${micros(v['node:crypto'])}`,
        '',
      );
    }
    if (r.halfPeak) {
      add(
        `ingest at half its peak (open loop)`,
        '≤64',
        rate(r.halfPeak.ingest.rate),
        ...latencyCells(r.halfPeak.ingest.latency),
        `offered ${rate(r.halfPeak.offered)}`,
        cpuCell(r.halfPeak.ingest.cpu),
      );
    }
  }
  if (r.duplicates) {
    const d = r.duplicates;
    section('2. ingest, duplicates (the same signed events replayed)');
    const unique = r.ingest.find((p) => p.concurrency === d.concurrency);
    add(
      `ingest HTTP, duplicates`,
      d.concurrency,
      rate(d.ingest.rate),
      ...latencyCells(d.ingest.latency),
      `A ${ratio(d.ingest.rate, d.A.rate)}${unique ? `, ×${ratio(d.ingest.rate, unique.ingest.rate)} unique` : ''}`,
      cpuCell(d.ingest.cpu),
    );
    add(
      `  baseline A: same SQL, same ids`,
      d.concurrency,
      rate(d.A.rate),
      ...latencyCells(d.A.latency),
      '',
      cpuCell(d.A.cpu),
    );
  }
  if (r.pipeline || r.queue) {
    section(
      '3. pipeline: receipts (50% duplicates) → ingest → worker → verified customer webhook; latency from ingest 200',
    );
    const q = r.queue;
    if (r.pipeline) {
      const { paced, sustained } = r.pipeline;
      add(
        `sustained (${sustained.offered} msgs in flight)`,
        r.options.pipelineConcurrency,
        `${rate(sustained.receiptsPerSecond)} rcpt`,
        ...latencyCells(sustained.latency),
        q ? `floor ${ratio(sustained.messagesPerSecond, q.burnDown / 2)}` : '',
        cpuCell(sustained.cpu),
      );
      addLegs(sustained.stages);
      add(
        `paced, ${rate(paced.offered)} receipts/s`,
        r.options.pipelineConcurrency,
        `${rate(paced.receiptsPerSecond)} rcpt`,
        ...latencyCells(paced.latency),
        q ? `2 wake-ups ${ms(2 * q.pickup.p50)}` : '',
        cpuCell(paced.cpu),
      );
      const h = r.pipeline.half;
      if (h) {
        add(
          `paced at half the sustained rate`,
          r.options.pipelineConcurrency,
          `${rate(h.receiptsPerSecond)} rcpt`,
          ...latencyCells(h.latency),
          `offered ${rate(h.offered)}`,
          cpuCell(h.cpu),
        );
        addLegs(h.stages);
      }
      const n = r.pipeline.neighbour;
      if (n) {
        add(
          `  noisy neighbour: ${n.hangingEndpoints} endpoints hang`,
          r.options.pipelineConcurrency,
          `${rate(n.receiptsPerSecond)} rcpt`,
          ...latencyCells(n.latency),
          `p50 ×${(n.latency.p50 / paced.latency.p50).toFixed(2)} paced`,
          cpuCell(n.cpu),
        );
      }
    }
    if (q) {
      add(`  queue floor: no-op job wake-up`, 1, rate(q.pickupRate), ...latencyCells(q.pickup), 'LISTEN/NOTIFY', '');
      add(
        `  queue floor: no-op burn-down`,
        q.concurrency,
        `${rate(q.burnDown)} jobs`,
        '',
        '',
        '',
        `${rate(q.burnDown / 2)} msgs max`,
        '',
      );
    }
  }
  if (r.delivery.length) {
    section('4. delivery: outbound events → local receiver answering 200 (latency: commit → arrival)');
    for (const d of r.delivery) {
      add(
        `${d.events} events, ${d.endpoints} endpoint${d.endpoints > 1 ? 's' : ''}`,
        DEFAULT_DELIVERY_CONCURRENCY,
        `${rate(d.rate)} evt`,
        ...latencyCells(d.latency),
        r.queue ? `floor ${ratio(d.rate, r.queue.burnDown)}` : '',
        cpuCell(d.cpu),
      );
    }
  }
  if (r.bulk) {
    const k = r.bulk;
    section(
      `4b. bulk send: ${k.messages} messages via the API → simulator → sent+delivered receipts (${k.carrier.duplicates} of ${k.carrier.receipts} webhooks duplicates, with the other account's) → customer`,
    );
    add(
      'completed (message.delivered verified at the endpoint)',
      32,
      `${rate(k.completedPerSecond)} msg`,
      ...latencyCells(k.steps.endToEnd),
      `created ${rate(k.createdPerSecond)}/s${k.carrierCores == null ? '' : `, sim ${cores(k.carrierCores)}`}` +
        (k.baseline ? `, ${ratio(k.completedPerSecond, k.baseline.completedPerSecond)} the old path` : ''),
      cpuCell(k.cpu),
    );
    if (k.paced) {
      const q = k.paced;
      add(
        `  mps 50 on each of 4 numbers (${q.messages} msg): sent at the carrier`,
        32,
        `${rate(q.sentPerSecond)} msg`,
        ...latencyCells(q.steps.endToEnd),
        `completed ${rate(q.completedPerSecond)}/s; busiest second at the carrier ${q.busiestAtCarrier.all}, one number ${q.busiestAtCarrier.oneNumber} (answers recorded ${q.busiestSecond})`,
        cpuCell(q.cpu),
      );
    }
    if (k.baseline) {
      const o = k.baseline;
      add(
        `  old path, same run: one job per message (${o.messages} msg)`,
        32,
        `${rate(o.completedPerSecond)} msg`,
        ...latencyCells(o.steps.endToEnd),
        `created ${rate(o.createdPerSecond)}/s; another account's created → dispatched p50 ${o.steps.bystanderDispatched.p50.toFixed(0)} ms`,
        cpuCell(o.cpu),
      );
    }
    const steps: [string, LatencySummary][] = [
      ['  POST /v1/messages (client)', k.steps.create],
      ['  created → dispatched', k.steps.queuedToDispatched],
      ['  dispatched → sent receipt stored', k.steps.dispatchedToSent],
      ['  sent receipt → delivered receipt stored', k.steps.sentToDelivered],
      ['  delivered receipt → customer webhook', k.steps.deliveredToWebhook],
    ];
    for (const [label, l] of steps) add(label, '', '', ...latencyCells(l), '', '');
    add(
      "  another account's message meanwhile: created → dispatched",
      '',
      `${k.steps.bystanderDispatched.count} msg`,
      ...latencyCells(k.steps.bystanderDispatched),
      `the campaign's: p50 ${k.steps.queuedToDispatched.p50.toFixed(0)} ms`,
      '',
    );
  }
  if (r.growth.length) {
    section('5. cost growth: stored carrier events (c=16; pipeline paced)');
    for (const g of r.growth) {
      const label = g.stored >= 1e6 ? `${g.stored / 1e6}M` : `${g.stored / 1e3}k`;
      add(
        `@${label} (table ${g.tableMiB} MiB, idx ${g.indexesMiB} MiB) ingest`,
        16,
        rate(g.ingest.rate),
        ...latencyCells(g.ingest.latency),
        `A ${ratio(g.ingest.rate, g.A.rate)}`,
        cpuCell(g.ingest.cpu),
      );
      add(`  baseline A`, 16, rate(g.A.rate), ...latencyCells(g.A.latency), '', cpuCell(g.A.cpu));
      add(
        `  pipeline`,
        r.options.pipelineConcurrency,
        `${rate(g.pipeline.receiptsPerSecond)} rcpt`,
        ...latencyCells(g.pipeline.latency),
        '',
        cpuCell(g.pipeline.cpu),
      );
    }
    if (r.growth.length === 2) {
      const [a, b] = r.growth as [GrowthPoint, GrowthPoint];
      add(
        `  large ÷ small`,
        '',
        ratio(b.ingest.rate, a.ingest.rate),
        ratio(b.ingest.latency.p50, a.ingest.latency.p50),
        ratio(b.ingest.latency.p99, a.ingest.latency.p99),
        '',
        `A ${ratio(b.A.rate, a.A.rate)}, pipeline p50 ${ratio(b.pipeline.latency.p50, a.pipeline.latency.p50)}`,
        '',
      );
    }
  }
  if (r.scale.length) {
    section('6. scale-out: ingest processes on one machine (64 connections spread over them)');
    const one = r.scale.find((p) => p.processes === 1);
    for (const p of r.scale) {
      add(
        `${p.processes} ingest process${p.processes > 1 ? 'es' : ''}`,
        64,
        rate(p.result.rate),
        ...latencyCells(p.result.latency),
        [one ? `×${ratio(p.result.rate, one.result.rate)}` : '', `A ${ratio(p.result.rate, p.A.rate)}`]
          .filter(Boolean)
          .join(', '),
        cpuCell(p.result.cpu),
      );
      add(
        `  baseline A: ${p.processes} writer${p.processes > 1 ? 's' : ''} over pg`,
        64,
        rate(p.A.rate),
        ...latencyCells(p.A.latency),
        one ? `×${ratio(p.A.rate, one.A.rate)}` : '',
        cpuCell(p.A.cpu),
      );
    }
  }

  const widths = header.map((h, i) =>
    Math.max(h.length, ...rows.filter((row) => row.length > 1).map((row) => String(row[i] ?? '').length)),
  );
  const fmt = (cells: Cell[]) =>
    cells
      .map((c, i) => (i === 0 ? String(c ?? '').padEnd(widths[i]!) : String(c ?? '').padStart(widths[i]!)))
      .join('  ')
      .trimEnd();
  lines.push(fmt(header));
  lines.push(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const row of rows) lines.push(row.length === 1 ? String(row[0]) : fmt(row));
  lines.push('');
  lines.push(
    'cores: CPU cores busy during the measurement: Handset processes / PostgreSQL / load generator (and receiver) / anything else on the machine',
  );
  if (r.targets.length) {
    lines.push('');
    lines.push('targets:');
    for (const t of r.targets)
      lines.push(`  ${t.met === null ? '?' : t.met ? 'met    ' : 'NOT met'}  ${t.target}: ${t.value}`);
  }
  for (const n of r.notes) lines.push(`note: ${n}`);
  return lines.join('\n');
}

/** What one ingest process should reach at 16 and 64 connections: its rate against A, its CPU per stored webhook. */
const INGEST_TARGETS = [
  { concurrency: 16, ofA: 0.5, cpuMicros: 150 },
  { concurrency: 64, ofA: 0.6, cpuMicros: 100 },
] as const;
/** Receipts per second the saturated pipeline should sustain, and its p99 at half that rate. */
const PIPELINE_SUSTAINED = 700;
const PIPELINE_HALF_P99_MS = 50;
/** Customer webhooks per second to the local receiver, by number of endpoints. */
const DELIVERY_TARGETS = [
  { endpoints: 1, rate: 500 },
  { endpoints: 8, rate: 1_500 },
] as const;

export function evaluateTargets(r: BenchReport): Target[] {
  const targets: Target[] = [];
  for (const t of INGEST_TARGETS) {
    const p = r.ingest.find((x) => x.concurrency === t.concurrency);
    if (!p) continue;
    const v = p.ingest.rate / p.A.rate;
    targets.push({
      target: `ingest ≥ ${t.ofA} × baseline A at concurrency ${t.concurrency}`,
      value: v.toFixed(2),
      met: v >= t.ofA,
    });
    const cpu = cpuPerStored(p.ingest);
    const floor = p.H ? cpuPerAnswered(p.H) : null;
    targets.push({
      target: `ingest CPU ≤ ${t.cpuMicros} µs per stored webhook at concurrency ${t.concurrency}`,
      value:
        cpu === null
          ? 'not measured'
          : `${cpu.toFixed(0)} µs${floor === null ? '' : ` (H, nothing stored: ${floor.toFixed(0)} µs)`}`,
      met: cpu === null ? null : cpu <= t.cpuMicros,
    });
  }
  if (r.halfPeak) {
    const p99 = r.halfPeak.ingest.latency.p99;
    targets.push({
      target: `ingest p99 ≤ 20 ms at half of its peak (${rate(r.halfPeak.offered)}/s)`,
      value: `${ms(p99)} ms`,
      met: p99 <= 20,
    });
  }
  if (r.pipeline) {
    const p50 = r.pipeline.paced.latency.p50;
    targets.push({
      target: 'pipeline p50 ≤ 50 ms, ingest 200 → customer webhook (paced)',
      value: `${ms(p50)} ms`,
      met: p50 <= 50,
    });
  }
  if (r.pipeline) {
    const v = r.pipeline.sustained.receiptsPerSecond;
    targets.push({
      target: `pipeline sustains ≥ ${PIPELINE_SUSTAINED} receipts/s`,
      value: `${rate(v)} receipts/s`,
      met: v >= PIPELINE_SUSTAINED,
    });
  }
  if (r.pipeline?.half) {
    const p99 = r.pipeline.half.latency.p99;
    targets.push({
      target: `pipeline p99 ≤ ${PIPELINE_HALF_P99_MS} ms at half the sustained rate (${rate(r.pipeline.half.offered)} receipts/s)`,
      value: `${ms(p99)} ms`,
      met: p99 <= PIPELINE_HALF_P99_MS,
    });
  }
  for (const t of DELIVERY_TARGETS) {
    const d = r.delivery.find((x) => x.endpoints === t.endpoints);
    if (!d) continue;
    targets.push({
      target: `delivery to ${t.endpoints} endpoint${t.endpoints > 1 ? 's' : ''} ≥ ${rate(t.rate)} events/s`,
      value: `${rate(d.rate)} events/s`,
      met: d.rate >= t.rate,
    });
  }
  if (r.pipeline?.neighbour) {
    const x = r.pipeline.neighbour.latency.p50 / r.pipeline.paced.latency.p50;
    targets.push({
      target: "pipeline p50 with another account's hanging endpoints ≤ 2 × without (same run)",
      value: `×${x.toFixed(2)}`,
      met: x <= 2,
    });
  }
  if (r.bulk?.baseline) {
    const x = r.bulk.completedPerSecond / r.bulk.baseline.completedPerSecond;
    targets.push({
      target: 'campaign end to end ≥ 4 × the old path (one job per message, same run), every webhook verified',
      value: `×${x.toFixed(2)} (${rate(r.bulk.completedPerSecond)} against ${rate(r.bulk.baseline.completedPerSecond)} msg/s)`,
      met: x >= 4 && r.bulk.extraEvents === 0,
    });
  }
  if (r.bulk?.paced) {
    const q = r.bulk.paced;
    targets.push({
      target:
        'mps 50 on each of 4 numbers: 200 ± 5% msg/s at the carrier, never above (busiest second of a number ≤ 50 at the carrier)',
      value: `${rate(q.sentPerSecond)} msg/s, busiest second ${q.busiestAtCarrier.all} (one number ${q.busiestAtCarrier.oneNumber})`,
      met: Math.abs(q.sentPerSecond - 200) <= 10 && q.busiestAtCarrier.oneNumber <= 50,
    });
  }
  if (r.bulk) {
    const p50 = r.bulk.steps.bystanderDispatched.p50;
    targets.push({
      target: "another account's message during the campaign: created → dispatched p50 ≤ 100 ms",
      value: `${ms(p50)} ms`,
      met: r.bulk.steps.bystanderDispatched.count > 0 ? p50 <= 100 : null,
    });
  }
  if (r.growth.length === 2) {
    const [a, b] = r.growth as [GrowthPoint, GrowthPoint];
    const ingest = b.ingest.rate / a.ingest.rate;
    const pipeline = b.pipeline.latency.p50 / a.pipeline.latency.p50;
    const ok = ingest >= 0.85 && pipeline <= 1.15;
    targets.push({
      target: `flat cost from ${a.stored.toLocaleString('en-US')} to ${b.stored.toLocaleString('en-US')} stored events (at most 15% worse)`,
      value: `ingest rate ×${ingest.toFixed(2)}, pipeline p50 ×${pipeline.toFixed(2)}`,
      met: ok,
    });
  }
  return targets;
}
