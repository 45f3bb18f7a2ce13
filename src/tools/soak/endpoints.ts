// The customer's webhook endpoints for the soak, on one loopback server: a healthy
// one (200 at once), a slow one (200 after 1–3 s, inside the delivery window) and a
// failing one (500 to every other request, so each event is retried and then
// delivered). Counts what each was asked.

import http from 'node:http';
import type { AddressInfo } from 'node:net';

export const ENDPOINT_KINDS = ['healthy', 'slow', 'failing'] as const;
export type EndpointKind = (typeof ENDPOINT_KINDS)[number];

export interface SoakEndpoints {
  url(kind: EndpointKind): string;
  requests: Record<EndpointKind, number>;
  close(): Promise<void>;
}

export async function startSoakEndpoints(): Promise<SoakEndpoints> {
  const requests: Record<EndpointKind, number> = { healthy: 0, slow: 0, failing: 0 };
  const server = http.createServer((req, res) => {
    const kind = (req.url ?? '').slice(1) as EndpointKind;
    req.resume();
    req.on('end', () => {
      if (!(kind in requests)) return void res.writeHead(404).end();
      const n = ++requests[kind];
      if (kind === 'slow') setTimeout(() => res.writeHead(200).end(), 1000 + Math.random() * 2000);
      else res.writeHead(kind === 'failing' && n % 2 === 1 ? 500 : 200).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: (kind) => `${base}/${kind}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
