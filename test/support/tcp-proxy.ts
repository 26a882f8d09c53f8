/**
 * A TCP proxy in front of a real service, for fault tests: `cut()` drops every
 * connection and refuses new ones (the service "goes away" for the client,
 * whatever backend it is), `restore()` lets connections through again.
 * `freeze()` keeps every connection open but holds the bytes either way (the
 * service "hangs": clients notice only by their own timeouts); `thaw()`
 * delivers what was held, in order, and passes bytes again.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';

export interface TcpProxy {
  port: number;
  /** Rewrites a URL or URI so it goes through the proxy. */
  via(url: string): string;
  cut(): Promise<void>;
  restore(): Promise<void>;
  freeze(): void;
  thaw(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  let port = 0;
  /** Bytes held while frozen, per destination, in arrival order. */
  let held: [Socket, Buffer][] | null = null;
  const forward = (to: Socket, chunk: Buffer) => {
    if (held) held.push([to, chunk]);
    else if (!to.destroyed) to.write(chunk);
  };

  const listen = async () => {
    server = createServer((client) => {
      const upstream = createConnection({ host: targetHost, port: targetPort });
      sockets.add(client);
      sockets.add(upstream);
      const drop = () => {
        client.destroy();
        upstream.destroy();
        sockets.delete(client);
        sockets.delete(upstream);
      };
      client.on('error', drop).on('close', drop);
      upstream.on('error', drop).on('close', drop);
      client.on('data', (chunk: Buffer) => forward(upstream, chunk));
      upstream.on('data', (chunk: Buffer) => forward(client, chunk));
    });
    server.listen(port, '127.0.0.1');
    await once(server, 'listening');
    port = (server.address() as AddressInfo).port;
  };

  const stop = async () => {
    for (const s of sockets) s.destroy();
    sockets.clear();
    if (server) {
      const closing = once(server, 'close');
      server.close();
      await closing;
      server = undefined;
    }
  };

  await listen();
  return {
    get port() {
      return port;
    },
    via(url: string) {
      return url.replace(`${targetHost}:${targetPort}`, `127.0.0.1:${port}`);
    },
    cut: stop,
    restore: async () => {
      if (!server) await listen();
    },
    close: stop,
    freeze() {
      held ??= [];
    },
    thaw() {
      const pending = held ?? [];
      held = null;
      for (const [to, chunk] of pending) if (!to.destroyed) to.write(chunk);
    },
  };
}

/** host and port of a URL or a single-host MongoDB URI. */
export function hostPortOf(url: string): { host: string; port: number } {
  const match = /^[a-z+]+:\/\/(?:[^@/]*@)?([^:/?]+):(\d+)/i.exec(url);
  if (!match) throw new Error(`cannot find host:port in ${url}`);
  return { host: match[1]!, port: Number(match[2]) };
}
