/**
 * No Docker engine runs where the tests run, so the deployment files are
 * checked here: the compose file parses, every service starts in order, every
 * variable the configuration requires in production is set for the API and
 * each worker service (one per queue, with the concurrency and memory limit of
 * the Kubernetes pools), and the Dockerfiles use pinned base images (the Node
 * version .ci/node24 pins), a non-root user, a health check and entry points
 * that exist.
 */
import { existsSync, readFileSync } from 'node:fs';
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
  image: ['image', 'maintenance'],
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
  });

  if (file === 'Dockerfile.worker') {
    it('carries qpdf', () => {
      expect(text).toMatch(/apt-get install[^\n]*qpdf/);
    });
  }
});
