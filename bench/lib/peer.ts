/**
 * The "in-process" peers of the convert, render and merge benchmarks run in a process
 * of their own, started like a worker (same Node flags and environment) but
 * with no queue: the storage read + sharp + storage write of a conversion, or
 * the PDF adapter's merge on inputs already in memory. A clean process keeps
 * the comparison fair: the benchmark's own process holds the clients, the
 * samples and the results, and its heap and event loop would slow any work
 * done there.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { RenderOptions } from '../../shared/media/render-options';
import { stopProcess } from '../../test/support/services/process';
import { startEnv, WORKER_NODE_FLAGS } from './stack';

export type PeerRequest =
  | { op: 'convert'; key: string; format: string }
  | { op: 'render'; key: string; options: RenderOptions }
  | { op: 'load-pdfs'; paths: string[] }
  | { op: 'merge' };

export interface PeerReply {
  /** Wall time of the operation inside the peer. */
  ms: number;
  pages?: number;
  /** The peer's RSS before the operation and its high-water mark after, bytes. */
  rssBefore?: number;
  peakRss?: number;
}

type Message =
  { id: number; ok: true; reply: PeerReply } | { id: number; ok: false; error: string };

export class Peer {
  private next = 0;
  private readonly pending = new Map<
    number,
    { resolve: (r: PeerReply) => void; reject: (e: Error) => void }
  >();

  private constructor(readonly child: ChildProcess) {
    child.on('message', (m: Message) => {
      const waiter = this.pending.get(m.id);
      if (!waiter) return;
      this.pending.delete(m.id);
      if (m.ok) waiter.resolve(m.reply);
      else waiter.reject(new Error(`peer: ${m.error}`));
    });
    child.on('exit', (code) => {
      for (const w of this.pending.values()) w.reject(new Error(`peer exited (${code})`));
      this.pending.clear();
    });
  }

  static async start(env: NodeJS.ProcessEnv): Promise<Peer> {
    const child = fork(join(__dirname, '..', 'peer-main.ts'), [], {
      env: { ...startEnv('start:worker'), ...env },
      execArgv: ['--import', 'tsx', ...WORKER_NODE_FLAGS],
      stdio: ['ignore', 2, 2, 'ipc'],
    });
    const peer = new Peer(child);
    await new Promise<void>((resolve, reject) => {
      child.once('message', () => resolve());
      child.once('exit', (code) => reject(new Error(`peer exited at start (${code})`)));
    });
    return peer;
  }

  get pid(): number {
    return this.child.pid!;
  }

  call(request: PeerRequest): Promise<PeerReply> {
    const id = ++this.next;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.child.send({ id, request });
    });
  }

  stop(): Promise<void> {
    return stopProcess(this.child);
  }
}
