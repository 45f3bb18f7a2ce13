// What the bench ran on (cores, memory, Node, PostgreSQL and the settings that
// decide commit cost), and where the CPU went during a measurement: the whole
// machine, the load generator (this process), each Handset process and the
// PostgreSQL cluster. On a 2-core machine the three compete for the same cores,
// so a throughput figure means little without this split.

import { readFileSync, readdirSync } from 'node:fs';
import os from 'node:os';
import type pg from 'pg';

export interface MachineInfo {
  cpus: number;
  cpuModel: string;
  memoryGiB: number;
  node: string;
  platform: string;
  postgres: string;
  postgresSettings: Record<string, string>;
  database: 'embedded' | 'DATABASE_URL';
}

const PG_SETTINGS = [
  'fsync',
  'synchronous_commit',
  'wal_sync_method',
  'shared_buffers',
  'max_connections',
  'commit_delay',
  'jit',
];

export async function machineInfo(pool: pg.Pool, database: MachineInfo['database']): Promise<MachineInfo> {
  const { rows } = await pool.query<{ version: string }>('SELECT version()');
  const settings = await pool.query<{ name: string; setting: string }>(
    `SELECT name, current_setting(name) AS setting FROM pg_settings WHERE name = ANY($1)`,
    [PG_SETTINGS],
  );
  return {
    cpus: os.cpus().length,
    cpuModel: os.cpus()[0]?.model.trim() ?? 'unknown',
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    platform: `${os.platform()} ${os.release()}`,
    postgres: rows[0]!.version.split(' on ')[0]!,
    postgresSettings: Object.fromEntries(settings.rows.map((r) => [r.name, r.setting])),
    database,
  };
}

// ---------------------------------------------------------------------------------
// CPU accounting from /proc (Linux); elsewhere every figure is null.

const TICKS_PER_SECOND = 100; // USER_HZ on every Linux we run on

function machineTicks(): { busy: number; total: number } | null {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    const idle = (v[3] ?? 0) + (v[4] ?? 0);
    const total = v.reduce((a, b) => a + b, 0);
    return { busy: total - idle, total };
  } catch {
    return null;
  }
}

/** utime + stime of one process, in ticks; null when it is gone. */
function processTicks(pid: number): number | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return null;
  }
}

function parentOf(pid: number): number | null {
  try {
    const m = /PPid:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/** The postmaster and every process it forked (backends, WAL writer, checkpointer…). */
function clusterPids(postmaster: number): number[] {
  const pids = [postmaster];
  try {
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const pid = Number(entry);
      if (parentOf(pid) === postmaster) pids.push(pid);
    }
  } catch {
    return pids;
  }
  return pids;
}

/** The postmaster of the cluster the pool talks to: the parent of our own backend (same machine only). */
export async function findPostmaster(pool: pg.Pool): Promise<number | null> {
  const { rows } = await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  return parentOf(rows[0]!.pid);
}

export interface CpuSplit {
  /** Busy cores of the whole machine (0…cpus), averaged over the measurement. */
  machine: number | null;
  /** This process: the load generator (and the receiver, where there is one). */
  client: number;
  /** Each watched Handset process, by label. */
  roles: Record<string, number | null>;
  /** The PostgreSQL cluster (includes other users' load when DATABASE_URL is shared). */
  postgres: number | null;
}

export interface CpuWatch {
  stop(): CpuSplit;
}

/** Starts measuring; `stop()` gives the average busy cores of each party since then. */
export function watchCpu(roles: Record<string, number>, postmaster: number | null): CpuWatch {
  const started = performance.now();
  const machine0 = machineTicks();
  const client0 = process.cpuUsage();
  const roles0 = Object.fromEntries(Object.entries(roles).map(([k, pid]) => [k, processTicks(pid)]));
  const pg0 = new Map<number, number>();
  if (postmaster) for (const pid of clusterPids(postmaster)) pg0.set(pid, processTicks(pid) ?? 0);
  return {
    stop() {
      const seconds = (performance.now() - started) / 1000;
      const machine1 = machineTicks();
      const client = process.cpuUsage(client0);
      const cores = (ticks: number) => ticks / TICKS_PER_SECOND / seconds;
      let pgTicks: number | null = null;
      if (postmaster) {
        pgTicks = 0;
        for (const pid of clusterPids(postmaster)) {
          const now = processTicks(pid);
          if (now !== null) pgTicks += now - (pg0.get(pid) ?? 0);
        }
      }
      return {
        machine:
          machine0 && machine1
            ? ((machine1.busy - machine0.busy) / Math.max(1, machine1.total - machine0.total)) * os.cpus().length
            : null,
        client: (client.user + client.system) / 1e6 / seconds,
        roles: Object.fromEntries(
          Object.entries(roles).map(([k, pid]) => {
            const before = roles0[k];
            const after = processTicks(pid);
            return [k, before != null && after != null ? cores(after - before) : null];
          }),
        ),
        postgres: pgTicks === null ? null : cores(pgTicks),
      };
    },
  };
}
