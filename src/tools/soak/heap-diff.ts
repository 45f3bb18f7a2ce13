// `node dist/tools/soak/heap-diff.js EARLY LATE`: what grew between two heap
// snapshots of one role (the soak's --heap-snapshots writes one at the end of a
// run: a short run's against an hour's), as DevTools'
// summary groups them: objects by constructor, closures by function, strings,
// arrays and code by kind. Prints the groups whose shallow size grew most, with
// their counts, so a slow climb in the soak's heap line names what climbs.

import { readFile } from 'node:fs/promises';

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

interface Group {
  count: number;
  bytes: number;
}

/** Shallow size and count per group (a constructor's name, `(closure) name`, `(string)`…). */
export function summarize(snap: Snapshot): Map<string, Group> {
  const fields = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const [typeAt, nameAt, sizeAt] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f)) as [
    number,
    number,
    number,
  ];
  const groups = new Map<string, Group>();
  for (let i = 0; i < snap.nodes.length; i += fields.length) {
    const type = types[snap.nodes[i + typeAt]!]!;
    const name = snap.strings[snap.nodes[i + nameAt]!]!;
    const key =
      type === 'object' || type === 'native'
        ? name
        : type === 'closure'
          ? `(closure) ${name || '(anonymous)'}`
          : `(${type})`;
    const g = groups.get(key) ?? { count: 0, bytes: 0 };
    g.count++;
    g.bytes += snap.nodes[i + sizeAt]!;
    groups.set(key, g);
  }
  return groups;
}

export interface GroupGrowth {
  group: string;
  early: Group;
  late: Group;
}

/** Every group that exists in either, most grown (in bytes) first. */
export function compare(early: Map<string, Group>, late: Map<string, Group>): GroupGrowth[] {
  const none = { count: 0, bytes: 0 };
  return [...new Set([...early.keys(), ...late.keys()])]
    .map((group) => ({ group, early: early.get(group) ?? none, late: late.get(group) ?? none }))
    .sort((a, b) => b.late.bytes - b.early.bytes - (a.late.bytes - a.early.bytes));
}

async function main(): Promise<void> {
  const [a, b] = process.argv.slice(2);
  if (!a || !b) {
    process.stderr.write('usage: heap-diff EARLY.heapsnapshot LATE.heapsnapshot\n');
    process.exit(2);
  }
  const read = async (file: string) => summarize(JSON.parse(await readFile(file, 'utf8')) as Snapshot);
  const [early, late] = await Promise.all([read(a), read(b)]);
  const total = (m: Map<string, Group>) => [...m.values()].reduce((n, g) => n + g.bytes, 0);
  const kb = (n: number) => `${(n / 1024).toFixed(1)} KB`;
  process.stdout.write(`shallow total ${kb(total(early))} → ${kb(total(late))}\n`);
  for (const g of compare(early, late).slice(0, 25)) {
    process.stdout.write(
      `${(g.late.bytes - g.early.bytes >= 0 ? '+' : '') + kb(g.late.bytes - g.early.bytes)}`.padStart(12) +
        `  ${String(g.early.count).padStart(8)} → ${String(g.late.count).padEnd(8)} ${g.group.slice(0, 80)}\n`,
    );
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
