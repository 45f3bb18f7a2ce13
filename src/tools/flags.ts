// The operator runs' flags (bench, chaos, soak): parsed strictly; --help prints the
// usage and exits 0; a mistake (an unknown flag, a bad value) is a usage error that
// says why, exit 2, before anything has started.

import { type ParseArgsConfig, parseArgs } from 'node:util';

/** The flags' values; `config.options` should declare `help` (a boolean) for --help to be known. */
export function parseFlags<T extends ParseArgsConfig>(
  usage: string,
  config: T,
): ReturnType<typeof parseArgs<T>>['values'] {
  let parsed: ReturnType<typeof parseArgs<T>>;
  try {
    parsed = parseArgs(config);
  } catch (error) {
    return usageError(usage, (error as Error).message);
  }
  if ((parsed.values as { help?: unknown }).help === true) {
    process.stdout.write(usage);
    process.exit(0);
  }
  return parsed.values;
}

export function usageError(usage: string, why: string): never {
  process.stderr.write(`${why}\n\n${usage}`);
  process.exit(2);
}
