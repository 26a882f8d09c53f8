/**
 * 7. Scaling: conversion throughput through the API with 1, 2 and 4 worker
 * processes (one job at a time each), with enough requests in flight to keep
 * every worker busy.
 */
import { type Benchmark } from '../lib/benchmark';
import { lines } from '../lib/charts';
import { cpuSeconds, machineBusySeconds } from '../lib/proc';
import type { BenchmarkResult, Table } from '../lib/report';
import { pool, stat } from '../lib/stats';
import { convertViaApi, ONE_JOB_EACH, uploadPhotos } from './convert';

export const scaling: Benchmark = {
  id: 'scaling',
  title: 'Scaling with worker processes',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const photo = ctx.quick ? 'Reconyx_HC500_Hyperfire.jpg' : 'hdr-iphone_hdr_YES.jpg';
    const counts = ctx.quick ? [1, 2] : [1, 2, 4];
    const inFlight = 2 * Math.max(...counts);
    const jobs = ctx.quick ? 4 : 24;
    const rounds = ctx.quick ? 1 : 3;
    const format = 'webp';
    const [key] = await uploadPhotos(ctx, [photo]);

    const table: Table = {
      columns: [
        { key: 'workers', label: 'worker processes' },
        { key: 'rate', label: 'images/s', digits: 2 },
        { key: 'speedup', label: 'speed-up over 1 worker', digits: 2 },
        { key: 'busy', label: 'machine CPU busy', digits: 0 },
        { key: 'workerCpu', label: 'CPU-s per image (workers)', digits: 3 },
      ],
      rows: [],
    };
    const points: { x: number; y: number; series: string }[] = [];
    let base: number | undefined;
    for (const n of counts) {
      const procs = await stack.setWorkers(n, ONE_JOB_EACH);
      await pool(n, n, () => convertViaApi(ctx, key!, format)); // warm every worker
      const rates: number[] = [];
      const busy: number[] = [];
      const cpuPerImage: number[] = [];
      for (let r = 0; r < rounds; r++) {
        ctx.log(`scaling: ${n} worker(s), round ${r + 1}/${rounds}`);
        const m0 = machineBusySeconds();
        const c0 = procs.reduce((s, p) => s + cpuSeconds(p.pid), 0);
        const ms = await pool(jobs, inFlight, () => convertViaApi(ctx, key!, format));
        const c1 = procs.reduce((s, p) => s + cpuSeconds(p.pid), 0);
        rates.push(jobs / (ms / 1000));
        busy.push(((machineBusySeconds() - m0) / (ms / 1000) / ctx.machine.cores) * 100);
        cpuPerImage.push((c1 - c0) / jobs);
      }
      const rate = stat(rates);
      base ??= rate.median;
      table.rows.push({
        workers: String(n),
        rate,
        speedup: stat(rates.map((x) => x / base!)),
        busy: `${stat(busy).median.toFixed(0)}%`,
        workerCpu: stat(cpuPerImage),
      });
      points.push({ x: n, y: rate.median, series: 'measured (median)' });
      points.push({
        x: n,
        y: base * Math.min(n, ctx.machine.cores),
        series: `linear up to ${ctx.machine.cores} cores`,
      });
    }
    await stack.clear();

    return {
      id: this.id,
      title: this.title,
      method: `
\`POST /media/convert\` of \`${photo}\` to ${format}, ${jobs} conversions per
round with ${inFlight} requests in flight (more than the workers take, so
none idles), ${rounds} round(s) per worker count. Each worker process runs
with \`WORKER_CONCURRENCY=1\`. **This machine has ${ctx.machine.cores}
cores** (${ctx.machine.cpuModel}); the API, Redis, S3 and MongoDB share them
with the workers. "Machine CPU busy" is the share of all cores busy during
the round, from \`/proc/stat\`.`,
      tables: [table],
      charts: [
        {
          id: 'scaling',
          title: 'Conversions per second by worker processes',
          spec: lines({
            title: `Conversions/s by worker processes (${ctx.machine.cores}-core machine)`,
            data: points,
            xTitle: 'worker processes',
            yTitle: 'images/s',
            points: true,
            xInteger: true,
          }),
        },
      ],
      targets: [],
    };
  },
};
