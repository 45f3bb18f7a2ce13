// The operator runs' command lines (bench, bench:calls, chaos, soak): commander in the style of
// the handset command (cli/command.ts), named as they are run (`npm run bench --
// …`). --help prints the usage and exits 0; a mistake (an unknown flag, a bad
// value) is a usage error that says why, then the usage, exit 2, before anything
// has started.

import { Command, CommanderError, InvalidArgumentError, Option, type OptionValues } from 'commander';
import { EXIT, styled, usageErrorLine } from '../cli/command.js';

/** The command of `npm run <name> -- [options]`. */
export function toolCommand(name: 'bench' | 'bench:calls' | 'chaos' | 'soak', description: string): Command {
  return new Command(`npm run ${name}`).usage('-- [options]').description(description);
}

/** The options of `argv`, or --help printed and exit 0, or a usage error and exit 2. */
export function parseTool<T extends OptionValues>(cmd: Command, argv: string[]): T {
  styled(cmd, { out: (text) => process.stdout.write(text), err: () => undefined }).helpOption(
    '-h, --help',
    'show this help',
  );
  try {
    cmd.parse(argv, { from: 'user' });
  } catch (err) {
    if (!(err instanceof CommanderError)) throw err;
    if (err.exitCode === EXIT.ok) process.exit(EXIT.ok);
    return usageError(cmd, err.message);
  }
  return cmd.opts<T>();
}

/** Says why on one line, then the usage, and exits 2. */
export function usageError(cmd: Command, why: string): never {
  process.stderr.write(`${usageErrorLine(cmd.name(), why)}\n\n${cmd.helpInformation()}`);
  process.exit(EXIT.usage);
}

/** An option's value as a number of at least `min` (`whole`: an integer), or a usage error that says so. */
export function numberAtLeast(min: number, whole = false): (text: string) => number {
  return (text) => {
    const v = Number(text);
    if (text.trim() === '' || !Number.isFinite(v) || v < min || (whole && !Number.isInteger(v)))
      throw new InvalidArgumentError(`expected a ${whole ? 'whole number' : 'number'} ≥ ${min}`);
    return v;
  };
}

/** A flag whose value is a number of at least `min` (`whole`: an integer). */
export function numberOption(flag: string, description: string, min: number, whole = true): Option {
  return new Option(flag, description).argParser(numberAtLeast(min, whole));
}
