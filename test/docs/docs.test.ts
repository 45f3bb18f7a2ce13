// The README and docs/ hold together: every relative link and anchor resolves the
// way GitHub renders them, every repository path they name exists, the README
// stays a page a newcomer reads, and each list the docs repeat from the code (event
// types, configuration variables, trigger scenarios, API routes) is the code's.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { SCENARIOS } from '../../src/dev/trigger.js';
import { EVENT_TYPES } from '../../src/outbox/outbox.sql.js';
import { openApiDocument } from '../../src/platform.js';
import { type Markdown, readMarkdown, ROOT } from '../support/markdown.js';

const FILES = [
  'README.md',
  ...readdirSync(path.join(ROOT, 'docs')).flatMap((f) => (f.endsWith('.md') ? [`docs/${f}`] : [])),
];
const docs = new Map(FILES.map((f) => [f, readMarkdown(f)]));
const doc = (f: string) => docs.get(f) ?? readMarkdown(f);

/** What a `code` cell names: the text of each code span in it. */
const spans = (cell: string) => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);

function table(md: Markdown, heading: string) {
  const found = md.tables.filter((t) => t.heading === heading);
  expect(found, `${md.file}: one table under "${heading}"`).toHaveLength(1);
  return found[0]!;
}

describe('the docs', () => {
  it('every relative link and #anchor in README.md and docs/*.md resolves', () => {
    const broken: string[] = [];
    for (const md of docs.values()) {
      for (const { href, line } of md.links) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(href) || href.startsWith('//')) continue; // https:, mailto:
        const [target = '', anchor] = href.split('#') as [string, string | undefined];
        const file = target ? path.join(path.dirname(md.file), decodeURIComponent(target)) : md.file;
        const where = `${md.file}:${line} → ${href}`;
        if (!existsSync(path.join(ROOT, file))) broken.push(`${where}: no file ${file}`);
        else if (anchor !== undefined) {
          if (!file.endsWith('.md')) broken.push(`${where}: an anchor into a file that is not Markdown`);
          else if (!doc(path.normalize(file)).anchors.has(decodeURIComponent(anchor)))
            broken.push(`${where}: no heading in ${file} makes #${anchor}`);
        }
      }
    }
    expect(broken).toEqual([]);
  });

  it('the docs link to each other: every docs/*.md is reachable from the README', () => {
    const linked = new Set<string>();
    const visit = (file: string) => {
      if (linked.has(file)) return;
      linked.add(file);
      for (const { href } of doc(file).links) {
        const target = href.split('#')[0]!;
        if (!target.endsWith('.md') || /^[a-z]+:/i.test(target)) continue;
        const next = path.normalize(path.join(path.dirname(file), target));
        if (docs.has(next)) visit(next);
      }
    };
    visit('README.md');
    expect(FILES.filter((f) => !linked.has(f))).toEqual([]);
  });

  it('every repository path the docs name in code exists', () => {
    const missing: string[] = [];
    for (const md of docs.values()) {
      for (const { text, line } of md.code) {
        const m = /^(?:src|test|bench|packages|docs)\/[\w./{},*<>@-]*$/.exec(text.replace(/[:,]$/, ''));
        // Placeholders (src/<domain>/, NNNN_*.sql) name a kind of file, not one; what a bench run writes under
        // bench/results/ is there only after a run.
        if (!m || /[<*]|NNNN|^bench\/results\/./.test(m[0])) continue;
        const brace = /\{([^}]+)\}/.exec(m[0]);
        const paths = brace ? brace[1]!.split(',').map((alt) => m[0].replace(brace[0], alt)) : [m[0]];
        for (const p of paths) {
          // Tests are named without their suffix: test/security/ssrf is test/security/ssrf.test.ts.
          if (!['', '.ts', '.test.ts'].some((ext) => existsSync(path.join(ROOT, p + ext))))
            missing.push(`${md.file}:${line}: ${p}`);
        }
      }
    }
    expect(missing).toEqual([]);
  });

  it('the README stays a page a newcomer reads top-down: at most 250 lines', () => {
    const lines = readFileSync(path.join(ROOT, 'README.md'), 'utf8').trimEnd().split('\n').length;
    expect(lines).toBeLessThanOrEqual(250);
  });

  it("webhooks.md's table of event types is EVENT_TYPES, in its order", () => {
    const types = table(doc('docs/webhooks.md'), 'Event types').rows.map((r) => spans(r[0]!)[0]);
    expect(types).toEqual([...EVENT_TYPES]);
  });

  it('configuration.md documents every variable the configuration reads, and nothing the code does not name', () => {
    const documented = doc('docs/configuration.md').tables.flatMap((t) => t.rows.flatMap((r) => spans(r[0]!)));
    const read = new Set<string>();
    const env = new Proxy({} as NodeJS.ProcessEnv, {
      get: (_, name) => {
        if (typeof name === 'string') read.add(name);
        return undefined;
      },
    });
    loadConfig(env, 'dev');
    loadConfig(env, 'serve');
    expect([...read].filter((v) => !documented.includes(v))).toEqual([]);

    const source = (dir: string): string =>
      readdirSync(dir, { withFileTypes: true })
        .map((e) =>
          e.isDirectory()
            ? source(path.join(dir, e.name))
            : /\.[jt]s$/.test(e.name)
              ? readFileSync(path.join(dir, e.name), 'utf8')
              : '',
        )
        .join('\n');
    const code = source(path.join(ROOT, 'src'));
    expect(documented.filter((v) => !read.has(v) && !code.includes(v))).toEqual([]);
    expect(new Set(documented).size).toBe(documented.length);
  });

  it("commands.md's trigger row names every scenario handset trigger has", () => {
    const rows = table(doc('docs/commands.md'), 'Every command').rows;
    const trigger = rows.find((r) => spans(r[0]!)[0]?.startsWith('handset trigger'));
    const named = spans(trigger![1]!);
    expect(Object.keys(SCENARIOS).filter((s) => !named.includes(s))).toEqual([]);
  });

  it("api.md's routes table is every method and path the API serves", async () => {
    const served = (await openApiDocument()).paths as Record<string, object>;
    const operations = Object.entries(served).flatMap(([p, methods]) =>
      Object.keys(methods).map((m) => `${m.toUpperCase()} ${p}`),
    );
    const listed = table(doc('docs/api.md'), 'Routes').rows.flatMap((r) =>
      spans(r[1]!).map((method) => `${method} ${spans(r[0]!)[0]}`),
    );
    expect(listed.sort()).toEqual(operations.sort());
  });
});
