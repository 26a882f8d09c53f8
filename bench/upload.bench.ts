/**
 * Upload benchmark (issue: upload and download API). Prints:
 *  - the throughput of a 100 MB upload through the API as a fraction of a
 *    direct `minio` putObject of the same bytes to the same storage, measured
 *    side by side (alternating, median of N rounds);
 *  - the API process's peak RSS (VmHWM) during uploads of growing size, to
 *    show memory stays flat in the file size.
 *
 * Run: npm run bench:upload [-- --rounds 5 --large-mb 1024]
 * The API runs as its own process from dist/ (npm run build first; the
 * script does it).
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { parseArgs } from 'node:util';
import { loadConfig } from '../shared/config';
import { createLogger } from '../shared/logger';
import { createS3Client, ensureBucket } from '../shared/storage/s3-client';
import { createDataContext } from '../api/context';
import { freePort, waitFor } from '../test/support/services/process';
import { runBenchmark, startServices } from './services';

const MB = 1024 * 1024;
const root = join(__dirname, '..');
const out = (line: string) => process.stdout.write(`${line}\n`);

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '5' },
    'size-mb': { type: 'string', default: '100' },
    'large-mb': { type: 'string', default: '1024' },
  },
});
const ROUNDS = Number(values.rounds);
const SIZE = Number(values['size-mb']) * MB;
const LARGE = Number(values['large-mb']) * MB;

/** A stream of `total` bytes made of one random 1 MB block repeated (cheap to produce). */
function bytes(total: number, block: Buffer): Readable {
  let sent = 0;
  return new Readable({
    read() {
      if (sent >= total) return void this.push(null);
      const n = Math.min(block.length, total - sent);
      sent += n;
      this.push(n === block.length ? block : block.subarray(0, n));
    },
  });
}

function uploadThroughApi(
  port: number,
  token: string,
  total: number,
  block: Buffer,
): Promise<number> {
  const boundary = `----bench${randomBytes(6).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="bench.jpg"\r\nContent-Type: image/jpeg\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/media/upload',
        headers: {
          Authorization: `Bearer ${token}`,
          'Content-Type': `multipart/form-data; boundary=${boundary}`,
          'Content-Length': String(head.length + total + tail.length),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          res.statusCode === 201
            ? resolve(res.statusCode)
            : reject(
                new Error(`upload answered ${res.statusCode}: ${Buffer.concat(chunks).toString()}`),
              ),
        );
      },
    );
    req.on('error', reject);
    req.write(head);
    const body = bytes(total, block);
    body.pipe(req, { end: false });
    body.on('end', () => req.end(tail));
  });
}

const peakRss = (pid: number) => {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
};
const currentRss = (pid: number) => {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
};
/** Resets the kernel's peak-RSS mark of a process (Linux: write 5 to clear_refs). */
const resetPeak = (pid: number) => execFileSync('sh', ['-c', `echo 5 > /proc/${pid}/clear_refs`]);
/** CPU seconds a process has used (user + system), from /proc. */
const cpuOf = (pid: number) => {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
};
/** Busy CPU seconds of the whole machine, from /proc/stat. */
const machineBusy = () => {
  const [, ...t] = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/);
  const n = t.map(Number);
  const idle = n[3]! + n[4]!;
  return (n.reduce((a, b) => a + b, 0) - idle) / 100;
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const mbps = (n: number, ms: number) => n / MB / (ms / 1000);

async function main() {
  out('building dist/ …');
  execFileSync('npm', ['run', '--silent', 'build'], { cwd: root, stdio: 'inherit' });
  const services = await startServices();
  out(services.describe());
  let api: ChildProcess | undefined;
  try {
    const port = await freePort();
    const env: NodeJS.ProcessEnv = {
      ...services.envFor('bench', port),
      MAX_FILE_SIZE: String(Math.max(LARGE, SIZE, 128 * MB) + MB),
    };
    const config = loadConfig(env);
    const bucket = config.s3!.bucket;
    const logger = createLogger({ level: 'warn' });
    const data = await createDataContext(config, logger);
    const { token } = await data.organizations.create('bench', 'Bench');
    const client = createS3Client(config.s3!);
    await ensureBucket(client, bucket, config.s3!.region, logger);

    // As `npm run start:api` runs it (package.json).
    api = spawn(
      process.execPath,
      ['--enable-source-maps', '--max-semi-space-size=2', 'dist/api/main.js'],
      {
        cwd: root,
        env: { ...env, MALLOC_ARENA_MAX: '2' },
        stdio: ['ignore', 'inherit', 'inherit'],
      },
    );
    await waitFor('API', async () => (await fetch(`http://127.0.0.1:${port}/healthz`)).ok, 30_000);
    const pid = api.pid!;
    out(`API pid ${pid}, idle RSS ${(currentRss(pid) / MB).toFixed(1)} MB`);

    const block = randomBytes(MB);
    block.set(readFileSync(join(root, 'test/fixtures/Canon_40D.jpg')).subarray(0, 4096)); // a JPEG head

    // Warm-up (connections, JIT).
    await client.putObject(bucket, 'bench/warm', bytes(8 * MB, block), 8 * MB);
    await uploadThroughApi(port, token.token, 8 * MB, block);

    const direct: number[] = [];
    const viaApi: number[] = [];
    const cpu = { directMachine: 0, apiMachine: 0, apiProcess: 0, benchDirect: 0, benchApi: 0 };
    const selfCpu = () => {
      const u = process.cpuUsage();
      return (u.user + u.system) / 1e6;
    };
    for (let i = 0; i < ROUNDS; i++) {
      let m = machineBusy();
      let b = selfCpu();
      let t = performance.now();
      await client.putObject(bucket, `bench/direct-${i}`, bytes(SIZE, block), SIZE);
      direct.push(performance.now() - t);
      cpu.directMachine += machineBusy() - m;
      cpu.benchDirect += selfCpu() - b;
      m = machineBusy();
      b = selfCpu();
      const a = cpuOf(pid);
      t = performance.now();
      await uploadThroughApi(port, token.token, SIZE, block);
      viaApi.push(performance.now() - t);
      cpu.apiMachine += machineBusy() - m;
      cpu.apiProcess += cpuOf(pid) - a;
      cpu.benchApi += selfCpu() - b;
    }
    const d = mbps(SIZE, median(direct));
    const a = mbps(SIZE, median(viaApi));
    out('');
    out(`## ${SIZE / MB} MB upload, ${ROUNDS} rounds each, alternating (median)`);
    out(
      `direct minio putObject (known size): ${d.toFixed(1)} MB/s  [${direct.map((x) => mbps(SIZE, x).toFixed(0)).join(', ')}]`,
    );
    out(
      `through the API (multipart, HTTP):   ${a.toFixed(1)} MB/s  [${viaApi.map((x) => mbps(SIZE, x).toFixed(0)).join(', ')}]`,
    );
    out(`ratio API / direct: ${(a / d).toFixed(3)}`);
    const per = (x: number) => (x / ROUNDS).toFixed(2);
    out(
      `CPU seconds per upload: direct: machine ${per(cpu.directMachine)} (client ${per(cpu.benchDirect)}); ` +
        `via API: machine ${per(cpu.apiMachine)} (API process ${per(cpu.apiProcess)}, client ${per(cpu.benchApi)})`,
    );

    out('');
    out('## API peak RSS (VmHWM) per upload size');
    for (const size of [...new Set([16 * MB, 128 * MB, LARGE])]) {
      resetPeak(pid);
      const t = performance.now();
      await uploadThroughApi(port, token.token, size, block);
      const ms = performance.now() - t;
      out(
        `${(size / MB).toFixed(0).padStart(5)} MB: peak RSS ${(peakRss(pid) / MB).toFixed(1)} MB, ${mbps(size, ms).toFixed(1)} MB/s`,
      );
    }

    // Clean up the bucket and database.
    const keys: string[] = [];
    for await (const o of client.listObjectsV2(bucket, '', true))
      keys.push((o as { name: string }).name);
    await client.removeObjects(bucket, keys);
    await client.removeBucket(bucket);
    await data.connection.dropDatabase();
    await data.close();
  } finally {
    api?.kill('SIGTERM');
    await services.stop();
  }
}

runBenchmark(main);
