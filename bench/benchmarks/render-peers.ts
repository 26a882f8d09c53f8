/**
 * Renders beside ipx (the image server behind Nuxt Image, same sharp), in one
 * run, alternating round by round: first renders (12 MP JPEG → 400 px WebP)
 * at 1 and 4 clients, the same render asked again, and conditional
 * revalidations (`If-None-Match` → 304) at 1 and 4 clients.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { stopProcess } from '../../test/support/services/process';
import { CORPUS, type BenchContext, type Benchmark } from '../lib/benchmark';
import { bars } from '../lib/charts';
import { closedLoop } from '../lib/http';
import { cpuByGroup, cpuSince, type ProcessGroup } from '../lib/proc';
import { target, type BenchmarkResult, type Table, type Target } from '../lib/report';
import { startEnv, WORKER_NODE_FLAGS } from '../lib/stack';
import { pool, ratios, stat, type Stat } from '../lib/stats';
import { uploadPhotos } from './convert';

/** 4032 × 3024 (12.2 MP), a phone JPEG of the corpus (as the render benchmark). */
const PHOTO = 'tests-42_IndexError.jpg';
const QUICK_PHOTO = 'gps-DSCN0010.jpg';
/** The same render on both sides: 400 px wide, WebP, quality 80 and effort 4 (both defaults). */
const OURS = 'w=400&format=webp';
const IPX = 'w_400,f_webp';
/** Two workers taking two jobs each: four renders at once, as many as the most clients. */
const WORKERS = 2;
const WORKER_ENV = { WORKER_CONCURRENCY: '2' };
const CLIENTS = [1, 4];
/** Our processes, for the CPU per first render. */
const OUR_GROUPS: ProcessGroup[] = ['api', 'workers', 's3 (swift)', 'mongodb', 'redis'];

class IpxPeer {
  private constructor(
    readonly child: ChildProcess,
    readonly url: string,
  ) {}

  static async start(dir: string): Promise<IpxPeer> {
    const child = fork(join(__dirname, '..', 'ipx-main.mjs'), [dir], {
      env: { ...process.env, ...startEnv('start:worker') },
      execArgv: WORKER_NODE_FLAGS,
      stdio: ['ignore', 2, 2, 'ipc'],
    });
    const [message] = (await Promise.race([
      once(child, 'message'),
      once(child, 'exit').then(([code]) => {
        throw new Error(`ipx exited at start (${String(code)})`);
      }),
    ])) as [{ port: number }];
    return new IpxPeer(child, `http://127.0.0.1:${message.port}`);
  }

  stop(): Promise<void> {
    return stopProcess(this.child);
  }
}

const client = new Agent({ connections: 8 });

/**
 * Uploads copies of the photo and waits for their placeholders (the thumbhash
 * listener decodes each new image on a worker): that work follows the upload,
 * not the render, and would otherwise take the cores during a timed pass.
 */
async function uploadSettled(ctx: BenchContext, photo: string, n: number): Promise<string[]> {
  const keys = await uploadPhotos(
    ctx,
    Array.from({ length: n }, () => photo),
  );
  const deadline = performance.now() + 60_000;
  for (;;) {
    const pending = await ctx.stack.data.models.Media.countDocuments({
      key: { $in: keys },
      thumbhash: { $exists: false },
    });
    if (pending === 0) return keys;
    if (performance.now() > deadline) throw new Error(`${pending} placeholders still missing`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function get(url: string, headers: Record<string, string> = {}) {
  const res = await request(url, { headers, dispatcher: client });
  const body = Buffer.from(await res.body.arrayBuffer());
  if (res.statusCode !== 200) throw new Error(`${url} answered ${res.statusCode}`);
  return { body, etag: String(res.headers.etag) };
}

export const renderPeers: Benchmark = {
  id: 'render-peers',
  title: 'Renders beside ipx',
  async run(ctx): Promise<BenchmarkResult> {
    const { stack } = ctx;
    const photo = ctx.quick ? QUICK_PHOTO : PHOTO;
    const rounds = ctx.quick ? 1 : 5;
    const perClient = ctx.quick ? 1 : 4;
    const durationMs = ctx.quick ? 300 : 2000;
    const dir = mkdtempSync(join(tmpdir(), 'bench-ipx-'));
    let files = 0;
    /** A copy of the photo under a name ipx has never seen: a first render. */
    const freshFile = () => {
      const name = `p${++files}.jpg`;
      copyFileSync(join(CORPUS, 'images', photo), join(dir, name));
      return name;
    };
    const getOurs = (key: string) => get(oursUrl(key), stack.auth);
    const oursUrl = (key: string) =>
      `${stack.url}/media/render?media=${encodeURIComponent(key)}&${OURS}`;
    const ipxUrl = (peer: IpxPeer, name: string) => `${peer.url}/${IPX}/${name}`;
    const targets: Target[] = [];
    const chart: { group: string; series: string; median: number; min: number; max: number }[] = [];
    const table: Table = {
      title: `${photo} → 400 px WebP, this service (API + ${WORKERS} workers × 2 jobs) beside ipx (one process), per second`,
      columns: [
        { key: 'work', label: 'work' },
        { key: 'clients', label: 'clients' },
        { key: 'ours', label: 'this service', digits: 1 },
        { key: 'ipx', label: 'ipx', digits: 1 },
        { key: 'ratio', label: 'ours ÷ ipx (per round)', digits: 2 },
        { key: 'target', label: 'target' },
      ],
      rows: [],
    };
    const cpu: Table = {
      title: 'Machine CPU per first render, by process, ms (median of the passes)',
      columns: [
        { key: 'clients', label: 'clients' },
        ...OUR_GROUPS.map((g) => ({ key: g, label: `ours: ${g}`, digits: 1 })),
        { key: 'ours', label: 'ours: all of these', digits: 1 },
        { key: 'ipx', label: 'ipx', digits: 1 },
      ],
      rows: [],
    };
    const record = (
      work: string,
      clients: number,
      ours: number[],
      peer: number[],
      op: '>=',
      limit: number,
      why: string,
    ) => {
      const ratio = stat(ratios(ours, peer));
      table.rows.push({
        work,
        clients: String(clients),
        ours: stat(ours),
        ipx: stat(peer),
        ratio,
        target: `${op} ${limit}`,
      });
      const group = `${work}, ${clients} client${clients > 1 ? 's' : ''}`;
      chart.push({ group, series: 'ipx', ...stat(peer) });
      chart.push({ group, series: 'this service', ...stat(ours) });
      targets.push(
        target(`${work}, ${clients} client(s): ours ÷ ipx`, ratio, op, limit, '', {
          digits: 2,
          why,
        }),
      );
    };

    await stack.setWorkers(WORKERS, WORKER_ENV);
    const peer = await IpxPeer.start(dir);
    try {
      // Warm-up both (JIT, connections, libvips' first use).
      const warm = await uploadSettled(ctx, photo, 2);
      for (const key of warm) await getOurs(key);
      for (let i = 0; i < 2; i++) await get(ipxUrl(peer, freshFile()));

      // 1. First renders: every request names a source never rendered before.
      for (const clients of CLIENTS) {
        const n = perClient * clients;
        const ours: number[] = [];
        const theirs: number[] = [];
        const cpuOurs: Map<ProcessGroup, number>[] = [];
        const cpuIpx: number[] = [];
        for (let r = 0; r < rounds; r++) {
          ctx.log(`render-peers: first renders, ${clients} client(s), round ${r + 1}/${rounds}`);
          const oursPass = async () => {
            const keys = await uploadSettled(ctx, photo, n);
            const cpu0 = cpuByGroup();
            const ms = await pool(n, clients, (i) => getOurs(keys[i]!).then(() => undefined));
            cpuOurs.push(cpuSince(cpu0));
            ours.push(n / (ms / 1000));
          };
          const ipxPass = async () => {
            const names = Array.from({ length: n }, freshFile);
            const cpu0 = cpuByGroup();
            const ms = await pool(n, clients, (i) =>
              get(ipxUrl(peer, names[i]!)).then(() => undefined),
            );
            cpuIpx.push(cpuSince(cpu0).get('ipx') ?? 0);
            theirs.push(n / (ms / 1000));
          };
          if (r % 2) {
            await ipxPass();
            await oursPass();
          } else {
            await oursPass();
            await ipxPass();
          }
        }
        const perRender = (s: number[]): Stat => stat(s.map((x) => (x * 1000) / n));
        const groups = Object.fromEntries(
          OUR_GROUPS.map((g) => [g, perRender(cpuOurs.map((p) => p.get(g) ?? 0))]),
        );
        cpu.rows.push({
          clients: String(clients),
          ...groups,
          ours: perRender(
            cpuOurs.map((p) => OUR_GROUPS.reduce((sum, g) => sum + (p.get(g) ?? 0), 0)),
          ),
          ipx: perRender(cpuIpx),
        });
        record(
          'first render',
          clients,
          ours,
          theirs,
          '>=',
          0.9,
          `ipx renders in its request; a first render here is a job: the API
authenticates, looks the source up and queues, a worker reads the source
from S3 (or its cache) and renders it beside its own lookups, then at once
reserves the bytes, books the variant on its record and hands the bytes
back through Redis; the variant's S3 write and its record's last update
follow the answer. The CPU table shows
what each process spends per render.`,
        );
      }

      // 2. The same render asked again, and its revalidation.
      const [key] = await uploadSettled(ctx, photo, 1);
      const ourEtag = (await getOurs(key!)).etag;
      const name = freshFile();
      const ipxEtag = (await get(ipxUrl(peer, name))).etag;
      const loop = (
        clients: number,
        url: string,
        headers: Record<string, string>,
        status: number,
      ) =>
        closedLoop({
          connections: clients,
          durationMs,
          expectStatus: status,
          send: (dispatcher: Agent) =>
            request(url, { headers: { ...stack.auth, ...headers }, dispatcher }),
        }).then((run) => run.requests / run.seconds);
      for (const [work, conditional] of [
        ['repeated render', false],
        ['revalidation (304)', true],
      ] as const) {
        for (const clients of CLIENTS) {
          const ours: number[] = [];
          const theirs: number[] = [];
          const status = conditional ? 304 : 200;
          const oursPass = async () =>
            ours.push(
              await loop(
                clients,
                oursUrl(key!),
                conditional ? { 'if-none-match': ourEtag } : {},
                status,
              ),
            );
          const ipxPass = async () =>
            theirs.push(
              await loop(
                clients,
                ipxUrl(peer, name),
                conditional ? { 'if-none-match': ipxEtag } : {},
                status,
              ),
            );
          await oursPass();
          await ipxPass();
          for (let r = 0; r < rounds; r++) {
            ctx.log(`render-peers: ${work}, ${clients} client(s), round ${r + 1}/${rounds}`);
            if (r % 2) {
              await ipxPass();
              await oursPass();
            } else {
              await oursPass();
              await ipxPass();
            }
          }
          // The warm-up pass is left out.
          ours.shift();
          theirs.shift();
          if (conditional) {
            record(
              work,
              clients,
              ours,
              theirs,
              '>=',
              0.8,
              `ipx answers 304 from the file's modification time (one stat of a local
file) in one handler: no token, rate limit, request log or metrics. Ours
answers from memory (the variant's ETag kept by the API: no MongoDB or
Redis read) but runs its whole request chain: the request's id, log and
metrics, authentication, the route's scope and query check. The measured
floors (docs/performance.md, "What a 304 costs, item by item"): a bare
node:http server spends 0.12-0.13 ms of CPU per 304, a bare Express app
0.15 ms, this API 0.5-0.7 ms on the same loaded machine, where the
benchmark's client shares the 2 cores with both sides; on a quiet machine
(\`bench/revalidation-probe.ts --clients 4\`, 2026-11-28) 0.033, 0.037 and
0.19 ms. Of the API's, its profile puts the largest single share on writing
the answer to the socket (the same system call every side makes); the rest
is spread over the chain (Express's router and query parsing, the metrics'
histograms, the token's SHA-256 for the cache, the request log), none of it
above a tenth.`,
            );
          } else {
            record(
              work,
              clients,
              ours,
              theirs,
              '>=',
              5,
              `ours streams the stored variant; ipx renders again (it keeps no variants).`,
            );
          }
        }
      }
    } finally {
      await peer.stop();
      rmSync(dir, { recursive: true, force: true });
    }

    return {
      id: this.id,
      title: this.title,
      method: `
ipx ${'4.0.0-beta.1'} (the image server behind Nuxt Image; its 4.x line uses
sharp 0.35, the sharp this service uses: the 3.x line is on 0.34) runs in a
process of its own, started with the worker's Node flags and environment,
with its own \`ipxFSStorage\` over a local folder holding copies of the same
JPEG: ipx reads the source from the local file system (its page cache), this
service reads it from S3 (Swift). Both answer \`${photo}\` at 400 px wide in
WebP (quality 80, effort 4: both sides' defaults); ipx as \`/${IPX}/<file>\`,
this service as \`GET /media/render?${OURS}\` (API + ${WORKERS} workers taking
2 jobs each). Each pass is timed on both sides in turn, the order alternating
round by round, ${rounds} round(s); the ratio is taken per round.

**First renders.** ${perClient} renders per client per pass, each naming a
source never rendered before: a fresh upload of the photo here (uploaded
before the pass is timed, and its placeholder computed: the thumbhash
listener's decode follows every upload and would otherwise share the cores
with the pass; it reads the image through the worker's source cache, so a
render taken by the same worker finds the bytes there, as a render soon after
an upload does in use: docs/renders.md, "The source cache"), a fresh copy of
the file for ipx (which reads it from the page cache).

The CPU table sums every process of the machine by its command line: on a
machine shared with other work, processes of the same kind (another Swift,
MongoDB stand-in or worker) count too, hence the wide min–max of some
columns; the ipx column is ipx's process alone.

**Repeated renders and revalidations.** The clients ask for one rendered
source for ${durationMs / 1000} s each (a closed loop, one keep-alive connection
each), unconditionally (200: ours streams the stored variant, ipx renders
again) or with the ETag of an earlier answer in \`If-None-Match\` (304); the
first pass of each is a warm-up, left out.

Measured on a 2-core machine shared with other work (the figures wander
more than usual).`,
      tables: [table, cpu],
      charts: [
        {
          id: 'render-peers',
          title: 'Renders beside ipx, per second',
          spec: bars({
            title: 'Answers per second (median, min–max)',
            data: chart,
            yTitle: 'answers/s',
            format: '.1f',
          }),
        },
      ],
      targets,
    };
  },
};
