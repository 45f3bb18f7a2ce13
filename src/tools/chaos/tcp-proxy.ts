// A TCP proxy in front of PostgreSQL that can be cut and restored, to see how
// Handset behaves when every database connection drops (the chaos run, the fault
// tests), and switched to another server, as whatever follows the leader does in a
// failover (the failover run).

import net from 'node:net';

export interface TcpProxy {
  port: number;
  /** Destroys every open connection and refuses new ones until restore(). */
  cut(): void;
  restore(): void;
  /**
   * New connections go to `port` from now on. Open ones are dropped (what fences
   * the old primary's sessions), unless `keepOpen`: a proxy that moves only new
   * connections, so those already open stay on the server they reached.
   */
  switchTo(port: number, opts?: { keepOpen?: boolean }): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  let open = true;
  let port = targetPort;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    if (!open) {
      client.destroy();
      return;
    }
    const upstream = net.connect(port, targetHost);
    sockets.add(client).add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const cut = () => {
    open = false;
    for (const s of sockets) s.destroy();
    sockets.clear();
  };
  return {
    port: (server.address() as net.AddressInfo).port,
    cut,
    restore() {
      open = true;
    },
    switchTo(to, opts = {}) {
      port = to;
      if (!opts.keepOpen) cut();
      open = true;
    },
    close() {
      cut();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
