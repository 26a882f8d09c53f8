/**
 * What the benchmarks read from Linux's /proc: a process's resident memory
 * (now and its high-water mark, which can be reset), CPU seconds used by a
 * process or the whole machine, and a description of the machine.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, totalmem, release } from 'node:os';

const MiB = 1024 * 1024;

function statusField(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1];
  if (kb === undefined) throw new Error(`no ${field} for process ${pid}`);
  return Number(kb) * 1024;
}

/** Resident memory now, in bytes. */
export const rss = (pid: number): number => statusField(pid, 'VmRSS');
/** Peak resident memory since the process started or since `resetPeakRss`, in bytes. */
export const peakRss = (pid: number): number => statusField(pid, 'VmHWM');
/** Resets the kernel's peak-RSS mark of a process (writing 5 to clear_refs). */
export function resetPeakRss(pid: number): void {
  writeFileSync(`/proc/${pid}/clear_refs`, '5');
}

/** CPU seconds a process has used (user + system). */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/**
 * CPU seconds a process's threads have run, to the nanosecond (the sum of
 * each live thread's `schedstat`), where `cpuSeconds` counts 10 ms clock
 * ticks: for figures of tens of milliseconds. A thread that has exited is no
 * longer counted, so compare readings of a process whose threads live on
 * (a Node process's own: main, libuv's pool, V8's).
 */
export function threadCpuSeconds(pid: number): number {
  let ns = 0;
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return ns / 1e9;
}

/** Busy CPU seconds of the whole machine (all cores) since boot. */
export function machineBusySeconds(): number {
  const [, ...ticks] = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/);
  const n = ticks.map(Number);
  return (n.reduce((a, b) => a + b, 0) - n[3]! - n[4]!) / 100;
}

/**
 * Samples a process's RSS every `intervalMs` until stopped; for charts of
 * memory over time.
 */
export function sampleRss(pid: number, intervalMs = 100): () => { ms: number; mib: number }[] {
  const started = performance.now();
  const samples: { ms: number; mib: number }[] = [];
  const take = () => {
    try {
      samples.push({ ms: performance.now() - started, mib: rss(pid) / MiB });
    } catch {
      // the process is gone
    }
  };
  take();
  const timer = setInterval(take, intervalMs);
  return () => {
    clearInterval(timer);
    take();
    return samples;
  };
}

export interface MachineInfo {
  cpuModel: string;
  cores: number;
  memoryGiB: number;
  kernel: string;
  node: string;
  /** 1-minute load average when the run started: how busy the machine already was. */
  loadAverage: number;
  qpdf: string;
}

export function machineInfo(): MachineInfo {
  let qpdf = 'not found';
  try {
    qpdf = execFileSync('qpdf', ['--version'], { encoding: 'utf8' }).split('\n')[0]!.trim();
  } catch {
    // not installed
  }
  return {
    cpuModel: cpus()[0]?.model.trim() ?? 'unknown',
    cores: cpus().length,
    memoryGiB: Math.round(totalmem() / 1024 ** 3),
    kernel: release(),
    node: process.version,
    loadAverage: Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]),
    qpdf,
  };
}

/** Who a process is, for CPU accounting during a benchmark pass. */
export type ProcessGroup =
  | 'api'
  | 'workers'
  | 'in-process peer'
  | 'ipx'
  | 's3 (swift)'
  | 'mongodb'
  | 'redis'
  | 'benchmark client'
  | 'other';

function groupOf(pid: number, cmdline: string): ProcessGroup {
  if (pid === process.pid) return 'benchmark client';
  if (/\bapi\/main\.(js|ts)\b/.test(cmdline)) return 'api';
  if (/\bworker\/main\.(js|ts)\b/.test(cmdline)) return 'workers';
  if (/peer-main\.ts\b/.test(cmdline)) return 'in-process peer';
  if (/ipx-main\.mjs\b/.test(cmdline)) return 'ipx';
  if (/swift|memcached/.test(cmdline)) return 's3 (swift)';
  if (/mongo-standin|\bmongod\b/.test(cmdline)) return 'mongodb';
  if (/redis-server/.test(cmdline)) return 'redis';
  return 'other';
}

/**
 * CPU seconds used so far by every process on the machine, summed by group
 * (its command line says which): the difference of two snapshots says which
 * part of a pass the machine's CPU went to. Threads count with their process.
 */
export function cpuByGroup(): Map<ProcessGroup, number> {
  const out = new Map<ProcessGroup, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    let cmdline: string;
    let seconds: number;
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      seconds = cpuSeconds(pid);
    } catch {
      continue; // gone meanwhile
    }
    const group = groupOf(pid, cmdline);
    out.set(group, (out.get(group) ?? 0) + seconds);
  }
  return out;
}

/** What each group used between two `cpuByGroup()` snapshots, in CPU seconds. */
export function cpuSince(before: Map<ProcessGroup, number>): Map<ProcessGroup, number> {
  const now = cpuByGroup();
  const out = new Map<ProcessGroup, number>();
  for (const [group, seconds] of now) {
    // A process that started during the pass counts from zero.
    out.set(group, Math.max(0, seconds - (before.get(group) ?? 0)));
  }
  return out;
}
