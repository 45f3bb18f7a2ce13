// The Node versions the project says it runs on (package.json `engines`) are ones
// every package it installs says it runs on too: no EBADENGINE warning on a
// supported Node, and no claim the dependencies do not back. The Node running
// this test is one of them (CI also runs it under Node 24).

import { readFileSync } from 'node:fs';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

const read = (file: string) => JSON.parse(readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8'));
const ours = (read('package.json') as { engines: { node: string } }).engines.node;
const lock = read('package-lock.json') as {
  packages: Record<string, { version?: string; engines?: { node?: string } | string[] }>;
};

describe('engines', () => {
  it('every installed package supports every Node version engines allows', () => {
    const narrower = Object.entries(lock.packages)
      .filter(([where]) => where !== '')
      .flatMap(([where, p]) => {
        const theirs = Array.isArray(p.engines) ? undefined : p.engines?.node;
        return theirs && !semver.subset(ours, theirs) ? [`${where}@${p.version}: node ${theirs}`] : [];
      });
    expect(narrower).toEqual([]);
  });

  it('names the LTS lines the project is tested on, and this Node is one of them', () => {
    for (const line of ['20', '22', '24']) expect(semver.intersects(ours, `${line}.x`), line).toBe(true);
    expect(semver.satisfies(process.version, ours)).toBe(true);
  });
});
