/**
 * The launcher's child processes (the API and the worker): started in their
 * own process group, their stderr passed through and its tail kept, so that a
 * child that dies is reported with its cause (`listen EADDRINUSE …`), and the
 * worker's port chosen free when WORKER_PORT is not set.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';

export type Role = 'api' | 'worker';

export interface Child {
  role: Role;
  process: ChildProcess;
  /** Resolves when the process exits, with how it ended and the cause it printed. */
  exited: Promise<Death>;
}

export interface Death {
  role: Role;
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The error line it printed last (`Error: listen EADDRINUSE: …`), or its last line. */
  cause: string | undefined;
}

const TAIL = 8 * 1024;

/** The error a dying Node process printed: the last `…Error: …` line, else the last line. */
export function causeIn(stderr: string): string | undefined {
  const lines = stderr
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  const errors = lines.filter((l) => /^(\w*Error\b|\[?\w*Error\]?:|E[A-Z]{3,}\b)/.test(l));
  return (errors.at(-1) ?? lines.at(-1))?.slice(0, 300);
}

export function spawnChild(role: Role, args: string[], env: NodeJS.ProcessEnv): Child {
  const child = spawn(process.execPath, args, {
    env,
    stdio: ['ignore', 'inherit', 'pipe'],
    // Its own process group: Ctrl-C reaches the launcher only, which then
    // stops the children once, in order (a second signal would make them quit at once).
    detached: true,
  });
  let tail = '';
  child.stderr.on('data', (chunk: Buffer) => {
    process.stderr.write(chunk);
    tail = (tail + chunk.toString('utf8')).slice(-TAIL);
  });
  // Watched from the moment it starts: a death during start-up is seen too.
  const exited = (async (): Promise<Death> => {
    const [code, signal] = (await once(child, 'exit')) as [number | null, NodeJS.Signals | null];
    // The last of its stderr may still be in the pipe.
    if (child.stderr && !child.stderr.readableEnded)
      await Promise.race([once(child.stderr, 'end'), new Promise((r) => setTimeout(r, 500))]);
    return { role, code, signal, cause: causeIn(tail) };
  })();
  return { role, process: child, exited };
}

export const describeDeath = (d: Death): string =>
  `the ${d.role} process exited (${d.signal ? `signal ${d.signal}` : `code ${d.code}`})${d.cause ? `: ${d.cause}` : ''}`;

/** Whether a TCP port can be listened on (all interfaces, as the worker listens). */
async function portFree(port: number): Promise<boolean> {
  const server = createServer();
  try {
    server.listen(port);
    await once(server, 'listening');
    return true;
  } catch {
    return false;
  } finally {
    if (server.listening) await new Promise((r) => server.close(r));
  }
}

/** `preferred` when it is free, else a port the system picks. */
export async function freePortPreferring(preferred: number): Promise<number> {
  if (preferred !== 0 && (await portFree(preferred))) return preferred;
  const server = createServer();
  server.listen(0);
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}
