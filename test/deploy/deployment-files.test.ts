/**
 * No Docker engine runs where the tests run (and the docker client here has no
 * compose plugin, so `docker compose config` cannot render the file either),
 * so the deployment files are parsed and checked here: the compose file parses, every service starts in order, every
 * variable the configuration requires in production is set for the API and
 * each worker service (one per queue, with the concurrency and memory limit of
 * the Kubernetes pools), Redis, /metrics and MinIO ask for credentials and the
 * service holds only a MinIO user limited to its bucket, and the Dockerfiles
 * use pinned base images (the Node
 * version .ci/node24 pins), a non-root user, a health check and entry points
 * that exist.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'yaml';
import { QUEUE_NAMES, loadConfig, type QueueName } from '../../shared/config';

const root = join(__dirname, '..', '..');
const read = (file: string) => readFileSync(join(root, file), 'utf8');

type Service = {
  image?: string;
  build?: { dockerfile: string };
  environment?: Record<string, string>;
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test: string[] };
  deploy?: { replicas?: number; resources?: { limits?: { memory?: string } } };
  command?: string[];
  entrypoint?: string[];
};
const compose = parse(read('docker-compose.yml'), { merge: true }) as {
  services: Record<string, Service>;
  volumes: Record<string, unknown>;
};

/** Resolves `${VAR:-default}` the way compose does with an empty environment. */
const resolve = (value: string) =>
  String(value).replace(
    /\$\{([A-Z0-9_]+)(?::-([^}]*))?\}/g,
    (_m, _name: string, def?: string) => def ?? '',
  );
const environmentOf = (service: string): NodeJS.ProcessEnv =>
  Object.fromEntries(
    Object.entries(compose.services[service]!.environment ?? {}).map(([k, v]) => [k, resolve(v)]),
  );
/**
 * The worker pools (a compose service and a Kubernetes Deployment each) and
 * the queues each takes: the light maintenance jobs (folder deletes) ride
 * with the image pool. Every queue is taken by exactly one pool.
 */
const POOLS: Record<string, readonly string[]> = {
  image: ['image', 'maintenance', 'webhook', 'scan', 'import'],
  pdf: ['pdf'],
};
const workers = Object.keys(POOLS).map((p) => `worker-${p}`);

/** Bytes of a compose (`2g`, binary units) or Kubernetes (`2Gi`) memory size. */
function bytes(size: string): number {
  const m = /^(\d+)\s*(b|k|ki|m|mi|g|gi)?b?$/i.exec(size.trim());
  if (!m) throw new Error(`unexpected memory size ${size}`);
  const unit = (m[2] ?? 'b').toLowerCase().replace(/i$/, '');
  return Number(m[1]) * 1024 ** ['b', 'k', 'm', 'g'].indexOf(unit);
}

describe('docker-compose.yml', () => {
  it('runs MongoDB, Redis, MinIO with its bucket, the API and a worker service per queue', () => {
    expect(Object.keys(compose.services).sort()).toEqual([
      'api',
      'clamd',
      'createbucket',
      'minio',
      'mongodb',
      'redis',
      ...workers,
    ]);
    expect(Object.values(POOLS).flat().sort()).toEqual([...QUEUE_NAMES].sort());
    expect(compose.services['worker-image']!.deploy?.replicas).toBe(2);
    expect(compose.services['worker-pdf']!.deploy?.replicas).toBe(1);
    expect(compose.services.redis!.command).toEqual(
      expect.arrayContaining(['--maxmemory-policy', 'noeviction']),
    );
    expect(Object.keys(compose.volumes).sort()).toEqual([
      'clamav-db',
      'minio-data',
      'mongodb-data',
      'redis-data',
    ]);
  });

  it('starts in order: dependencies healthy, the bucket created', () => {
    for (const name of ['mongodb', 'redis', 'minio'])
      expect(compose.services[name]!.healthcheck).toBeDefined();
    for (const name of ['api', ...workers]) {
      expect(compose.services[name]!.depends_on).toEqual({
        mongodb: { condition: 'service_healthy' },
        redis: { condition: 'service_healthy' },
        createbucket: { condition: 'service_completed_successfully' },
      });
    }
    expect(compose.services.createbucket!.depends_on).toEqual({
      minio: { condition: 'service_healthy' },
    });
  });

  it.each(['api', ...workers])('sets every variable the %s needs in production', (name) => {
    const env = environmentOf(name);
    expect(env.NODE_ENV).toBe('production');
    expect(() => loadConfig(env)).not.toThrow();
  });

  it.each(Object.keys(POOLS))(
    'worker-%s takes its queues only, with the concurrency and memory limit of its Kubernetes pool',
    (queue) => {
      const config = loadConfig(environmentOf(`worker-${queue}`));
      expect(config.worker.queues).toEqual(POOLS[queue]);
      // deploy/kubernetes/base/worker-<queue>.yaml explains both figures.
      const pool = parse(read(`deploy/kubernetes/base/worker-${queue}.yaml`)) as {
        spec: {
          template: {
            spec: {
              containers: {
                env: { name: string; value: string }[];
                resources: { limits: { memory: string } };
              }[];
            };
          };
        };
      };
      const container = pool.spec.template.spec.containers[0]!;
      const podEnv = Object.fromEntries(container.env.map((e) => [e.name, e.value]));
      expect(config.worker.concurrency[queue as QueueName]).toBe(Number(podEnv.WORKER_CONCURRENCY));
      const limit = compose.services[`worker-${queue}`]!.deploy?.resources?.limits?.memory;
      expect(limit).toBeDefined();
      expect(bytes(limit!)).toBe(bytes(container.resources.limits.memory));
    },
  );

  /**
   * Runs createbucket's script with sh as compose would (`$$` is `$`), with an
   * `mc` on the PATH that records each call (and the policy file it is given)
   * and answers `admin user info` with `userInfo`.
   */
  function runInitScript(env: NodeJS.ProcessEnv, userInfo: string) {
    const dir = mkdtempSync(join(tmpdir(), 'media-compose-init-'));
    try {
      const log = join(dir, 'calls.jsonl');
      writeFileSync(
        join(dir, 'mc'),
        [
          '#!/bin/sh',
          'file=""; for a in "$@"; do case "$a" in *.json) file=$(cat "$a");; esac; done',
          `node -e 'require("fs").appendFileSync(process.argv[1], JSON.stringify({ args: process.argv.slice(3).join(" "), file: process.argv[2] || undefined }) + "\\n")' ${JSON.stringify(log)} "$file" "$@"`,
          `[ "$1 $2 $3" = "admin user info" ] && printf '%s\\n' ${JSON.stringify(userInfo)}`,
          'exit 0',
        ].join('\n'),
        { mode: 0o755 },
      );
      const [shell, flags, text] = compose.services.createbucket!.entrypoint!;
      const result = spawnSync(shell!, [flags!, text!.replace(/\$\$/g, '$')], {
        env: { ...env, PATH: `${dir}:${process.env.PATH}`, TMPDIR: dir },
        encoding: 'utf8',
      });
      expect({ status: result.status, stderr: result.stderr }).toEqual({ status: 0, stderr: '' });
      return readFileSync(log, 'utf8')
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as { args: string; file?: string });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  it('Redis asks for a password, and the API and every worker give it in REDIS_URL', () => {
    const command = compose.services.redis!.command!.map(resolve);
    const password = command[command.indexOf('--requirepass') + 1];
    expect(password).toMatch(/^[\w.-]{12,}$/);
    for (const name of ['api', ...workers]) {
      const url = new URL(environmentOf(name).REDIS_URL!);
      expect({ name, password: decodeURIComponent(url.password) }).toEqual({ name, password });
      expect(loadConfig(environmentOf(name)).redisUrl).toBe(url.toString().replace(/\/$/, ''));
    }
    // The health check authenticates (redis-cli reads REDISCLI_AUTH) and wants PONG.
    expect(resolve(compose.services.redis!.environment!.REDISCLI_AUTH!)).toBe(password);
    expect(compose.services.redis!.healthcheck!.test.join(' ')).toMatch(/redis-cli ping.*PONG/);
  });

  it('sets METRICS_TOKEN for the API and every worker', () => {
    for (const name of ['api', ...workers]) {
      const token = loadConfig(environmentOf(name)).metricsToken;
      expect({ name, token }).toEqual({
        name,
        token: expect.stringMatching(/^\S{12,}$/) as string,
      });
    }
  });

  it("the service reaches MinIO as its own user, limited to the bucket's objects, never as root", () => {
    const root = environmentOf('minio');
    const init = environmentOf('createbucket');
    const bucket = init.S3_BUCKET!;
    for (const name of ['api', ...workers]) {
      const s3 = loadConfig(environmentOf(name)).s3!;
      expect(s3.bucket).toBe(bucket);
      expect(s3.accessKey).not.toBe(root.MINIO_ROOT_USER);
      expect(s3.secretKey).not.toBe(root.MINIO_ROOT_PASSWORD);
      // The user createbucket makes is this one.
      expect([s3.accessKey, s3.secretKey]).toEqual([init.S3_ACCESS_KEY, init.S3_SECRET_KEY]);
    }
    expect([init.MINIO_ROOT_USER, init.MINIO_ROOT_PASSWORD]).toEqual([
      root.MINIO_ROOT_USER,
      root.MINIO_ROOT_PASSWORD,
    ]);
    // MinIO wants secret keys of 8 characters or more.
    expect(init.S3_SECRET_KEY!.length).toBeGreaterThanOrEqual(8);

    // As root: the bucket, the policy from APP_POLICY, the user, the policy attached to it.
    // The script run for real by sh, with an `mc` that records its calls: as root, the
    // bucket, the policy (APP_POLICY as written), the user, the policy attached to the user.
    const calls = runInitScript(init, '');
    expect(calls.map((c) => c.args)).toEqual([
      `alias set local http://minio:9000 ${root.MINIO_ROOT_USER} ${root.MINIO_ROOT_PASSWORD}`,
      `mb --ignore-existing local/${bucket}`,
      expect.stringMatching(/^admin policy create local media-app \/\S+\.json$/) as string,
      `admin user add local ${init.S3_ACCESS_KEY} ${init.S3_SECRET_KEY}`,
      `admin user info local ${init.S3_ACCESS_KEY}`,
      `admin policy attach local media-app --user ${init.S3_ACCESS_KEY}`,
    ]);
    expect(JSON.parse(calls[2]!.file!)).toEqual(JSON.parse(init.APP_POLICY!));
    // A second start: the policy is already attached, and the script still succeeds.
    expect(
      runInitScript(init, 'PolicyName: media-app')
        .map((c) => c.args)
        .at(-1),
    ).toBe(`admin user info local ${init.S3_ACCESS_KEY}`);
    // Any failing step fails the one-shot (and so the stack's start): sh -e.
    expect(compose.services.createbucket!.entrypoint!.slice(0, 2)).toEqual(['sh', '-ec']);

    const policy = JSON.parse(init.APP_POLICY!) as {
      Statement: { Effect: string; Action: string[]; Resource: string[] }[];
    };
    const allowed = new Map<string, string[]>();
    for (const st of policy.Statement) {
      expect(st.Effect).toBe('Allow');
      for (const action of st.Action) allowed.set(action, st.Resource);
    }
    // Objects of the bucket; the bucket itself for listing only.
    for (const [action, resources] of allowed) {
      expect(action).toMatch(/^s3:[A-Za-z]+$/); // no wildcard, no admin:*
      expect(resources).toEqual([
        /Object|MultipartUploadParts|AbortMultipartUpload/.test(action)
          ? `arn:aws:s3:::${bucket}/*`
          : `arn:aws:s3:::${bucket}`,
      ]);
    }
    expect([...allowed.keys()].sort()).toEqual(
      [
        's3:AbortMultipartUpload',
        's3:DeleteObject',
        's3:GetBucketLocation',
        's3:GetObject',
        's3:ListBucket',
        's3:ListBucketMultipartUploads',
        's3:ListMultipartUploadParts',
        's3:PutObject',
      ].sort(),
    );
  });

  it('pins every image', () => {
    for (const [name, service] of Object.entries(compose.services)) {
      if (service.image)
        expect({ name, image: service.image }).toEqual({
          name,
          image: expect.stringMatching(/:[^:]*\d[^:]*$/) as string,
        });
      else expect(service.build).toBeDefined();
    }
  });
});

describe.each(['Dockerfile.api', 'Dockerfile.worker'])('%s', (file) => {
  const text = read(file);
  const scripts = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts;

  it('uses pinned glibc base images', () => {
    const bases = [...text.matchAll(/^FROM\s+(\S+)/gm)].map((m) => m[1]!);
    expect(bases.length).toBeGreaterThanOrEqual(2); // multi-stage
    for (const base of bases) {
      expect(base).toMatch(/^node:\d+\.\d+(\.\d+)?-bookworm(-slim)?(@sha256:[0-9a-f]{64})?$/);
    }
  });

  it('runs the Node version that CI pins, which package.json engines allow', () => {
    const pinned = /^NODE24_VERSION=(\d+\.\d+\.\d+)$/m.exec(read('.ci/node24'))?.[1];
    expect(pinned).toBeDefined();
    for (const m of text.matchAll(/^FROM\s+node:(\S+?)-bookworm/gm)) expect(m[1]).toBe(pinned);
    const engines = (JSON.parse(read('package.json')) as { engines: { node: string } }).engines;
    const minMajor = Number(/^>=\s*(\d+)/.exec(engines.node)?.[1]);
    expect(Number(pinned!.split('.')[0])).toBeGreaterThanOrEqual(minMajor);
  });

  it('runs as a non-root user with a health check', () => {
    expect(text).toMatch(/^USER\s+(?!root\b)\S+/m);
    expect(text).toMatch(/^HEALTHCHECK\s/m);
    expect(text).toMatch(/npm prune --omit=dev|npm ci --omit=dev/);
  });

  it('copies production code only: api/, worker/, shared/ and the build files, never dev/', () => {
    const sources = [...text.matchAll(/^COPY\s+(?!--from=)(.+)$/gm)].flatMap((m) =>
      m[1]!.trim().split(/\s+/).slice(0, -1),
    );
    expect(sources.sort()).toEqual(
      [
        'api',
        'package-lock.json',
        'package.json',
        'package.json',
        'shared',
        'tsconfig.build.json',
        'tsconfig.json',
        'worker',
      ].sort(),
    );
  });

  it('starts an entry point that the build produces, as the package.json script does', () => {
    const cmd = /^CMD\s+(\[.*\])$/m.exec(text)?.[1];
    expect(cmd).toBeDefined();
    const args = JSON.parse(cmd!) as string[];
    const entry = args.find((a) => a.startsWith('dist/'))!;
    expect(existsSync(join(root, entry.replace(/^dist\//, '').replace(/\.js$/, '.ts')))).toBe(true);
    const script = file === 'Dockerfile.api' ? scripts['start:api'] : scripts['start:worker'];
    expect(script).toContain(entry);
    for (const flag of args.filter((a) => a.startsWith('--'))) expect(script).toContain(flag);
    // The environment the script sets before `node` (glibc's malloc tuning) is the image's too.
    const words = script!.split(/\s+/);
    for (const assignment of words.slice(0, words.indexOf('node'))) {
      expect(text).toMatch(new RegExp(`^ENV ${assignment}$`, 'm'));
    }
  });

  if (file === 'Dockerfile.worker') {
    it('carries qpdf', () => {
      expect(text).toMatch(/apt-get install[^\n]*qpdf/);
    });
  }
});
