// What every handset command shares, on top of commander: lowercase titles and help
// within 120 columns, a usage error as one line that names the command and
// suggests the nearest name, and one set of exit codes. Nothing here exits the
// process: commander's exits become thrown CommanderErrors, which the entry point
// turns into exit codes.

import { Command, CommanderError } from 'commander';

/** The exit codes of every command. */
export const EXIT = { ok: 0, failure: 1, usage: 2 } as const;

export const EXIT_STATUS_HELP = 'exit status: 0 ok, 1 it failed, 2 usage error (an unknown command, flag or value)';

/** The command was used wrongly (exit 2); the message says how. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** `handset accounts create`: the names from the root down. */
export function commandPath(cmd: Command): string {
  const names: string[] = [];
  for (let c: Command | null = cmd; c; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

/**
 * Commander's "error: unknown option '--jsno'\n(Did you mean --json?)" as one
 * line that names the command, then where its usage is.
 */
export function usageErrorText(path: string, message: string): string {
  return `${usageErrorLine(path, message)}\n(${path} --help shows how to use it)\n`;
}

/** Commander's error message as one line that names the command. */
export function usageErrorLine(path: string, message: string): string {
  const line = message
    .trim()
    .replace(/^error: /, '')
    .replace(/\n\(Did you mean one of (.+)\?\)$/, ' — did you mean one of $1?')
    .replace(/\n\(Did you mean (.+)\?\)$/, " — did you mean '$1'?");
  return `${path}: ${line}`;
}

interface Output {
  out: (text: string) => void;
  err: (text: string) => void;
}

const processOutput: Output = {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
};

/** Applies the house style to a command and every command under it (commander's addCommand does not). */
export function styled(cmd: Command, output: Output = processOutput): Command {
  cmd
    .configureHelp({
      helpWidth: Math.min(process.stdout.columns || 120, 120),
      styleTitle: (title) => title.toLowerCase(),
    })
    .helpOption('-h, --help', cmd.parent ? 'show this help' : 'show this help (every command has its own)')
    .showSuggestionAfterError(true)
    .exitOverride()
    .configureOutput({
      writeOut: output.out,
      writeErr: output.err,
      outputError: (text, write) => write(usageErrorText(commandPath(cmd), text)),
    });
  for (const sub of cmd.commands) styled(sub, output);
  return cmd;
}

/** A command's help as `handset <name> --help` prints it. */
export function helpOf(define: () => Command): string {
  const cmd = define();
  styled(new Command('handset').addCommand(cmd));
  return cmd.helpInformation();
}

/**
 * Parses the arguments of one command on its own, as `handset <name> …` would:
 * the parsed command, or 'help' when asked for it; a usage error is thrown as a
 * UsageError and nothing is printed (a module's own entry point, and its tests).
 */
export function parseAlone(define: () => Command, args: string[]): Command | 'help' {
  const cmd = define();
  const silent = { out: () => undefined, err: () => undefined };
  styled(new Command('handset').addCommand(cmd), silent);
  try {
    cmd.parse(args, { from: 'user' });
    return cmd;
  } catch (err) {
    if (!(err instanceof CommanderError)) throw err;
    if (err.exitCode === 0) return 'help';
    throw new UsageError(err.message.replace(/^error: /, ''), { cause: err });
  }
}

/** The candidate nearest to a mistyped name (at most a third of its letters off), if any. */
export function nearest(name: string, candidates: readonly string[]): string | null {
  let best: string | null = null;
  let bestDistance = Math.max(1, Math.floor(name.length / 3)) + 1;
  for (const c of candidates) {
    const d = editDistance(name, c);
    if (d < bestDistance) [best, bestDistance] = [c, d];
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      next[j] = Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    row = next;
  }
  return row[b.length]!;
}
