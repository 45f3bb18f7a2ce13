// Before a command starts anything: every port it will listen on is free, or one
// line names the variable that sets it. Found busy only after the embedded
// PostgreSQL (or the migrations) had started, it would leave a half-started
// platform to stop and a bare EADDRINUSE to decipher.

import { createServer } from 'node:net';

export interface PortClaim {
  /** The environment variable that sets it. */
  variable: string;
  /** 0 = any free port, always available. */
  port: number;
}

export async function assertPortsFree(host: string, claims: readonly PortClaim[]): Promise<void> {
  const problems: string[] = [];
  for (const { variable, port } of claims) {
    if (port === 0) continue;
    const code = await listenProbe(host, port);
    if (code === null) continue;
    const what = code === 'EADDRINUSE' ? 'is in use' : `cannot be listened on (${code})`;
    problems.push(`port ${port} on ${host} (${variable}) ${what}`);
  }
  if (problems.length === 0) return;
  const variables = claims.filter((c) => problems.some((p) => p.includes(`(${c.variable})`))).map((c) => c.variable);
  throw new Error(
    `${problems.join('; ')}: stop what uses it, or set ${variables.join(', ')} to another port (0 = any free port)`,
  );
}

/** Null when the port can be listened on, else the error code. */
function listenProbe(host: string, port: number): Promise<string | null> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    srv.listen({ host, port, exclusive: true }, () => srv.close(() => resolve(null)));
  });
}
