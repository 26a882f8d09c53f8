/**
 * deploy/kubernetes, without a cluster: `kubectl kustomize` renders the dev and
 * prod overlays, every rendered object is validated against the Kubernetes
 * (1.32) and KEDA JSON schemas that the kubernetes-models packages ship (no
 * download at test time), including a check for fields those schemas do not
 * know (a typo such as `readOnlyRootFilesytem` would otherwise pass, since the
 * schemas allow extra properties), and the rules the deployment must keep:
 * one worker Deployment per queue, hardened containers, probes on the
 * documented paths, grace periods above the shutdown timeout, KEDA on the
 * BullMQ lists of each pool and its backlog (waiting + held by the fair gate,
 * through Prometheus, the query run by promtool), the PDF pool's memory limit
 * above the documented merge bound, network policies, the reconcile CronJob.
 *
 * Needs kubectl with kustomize v5 (KUBECTL overrides the command) and promtool
 * (PROMTOOL): the test fails, saying so, where either is missing.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  ScaledObject,
  TriggerAuthentication,
  type IScaledObject,
  type ITriggerAuthentication,
} from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { Deployment, type IDeployment } from 'kubernetes-models/apps/v1';
import {
  HorizontalPodAutoscaler,
  type IHorizontalPodAutoscaler,
} from 'kubernetes-models/autoscaling/v2';
import { CronJob, type ICronJob } from 'kubernetes-models/batch/v1';
import {
  Ingress,
  NetworkPolicy,
  type IIngress,
  type INetworkPolicy,
} from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget, type IPodDisruptionBudget } from 'kubernetes-models/policy/v1';
import {
  ConfigMap,
  Secret,
  Service,
  type IContainer,
  type IPodSpec,
  type IProbe,
  type IService,
} from 'kubernetes-models/v1';
import { parseAllDocuments } from 'yaml';
import { QUEUE_NAMES, loadConfig } from '../../shared/config';
import { PDF_MERGE_DEFAULTS } from '../../worker/pdf/pdf.adapter';
import { BACKLOG_MID_UPGRADE, expectPromqlAnswer, queueJobsMidUpgrade } from '../support/promql';

const root = join(__dirname, '..', '..');
const read = (file: string) => readFileSync(join(root, file), 'utf8');
const KUBECTL = process.env.KUBECTL || 'kubectl';
const OVERLAYS = ['dev', 'prod'] as const;
type Overlay = (typeof OVERLAYS)[number];

/**
 * What a KEDA backlog query answers over two API replicas' scrapes of `queue`
 * in `namespace` during a rolling upgrade (`queueJobsMidUpgrade`), beside
 * another namespace's and another queue's held jobs, which must not count:
 * run by promtool, it must be the queue's backlog, 8 (1 waiting + 5 held + 2
 * prioritized, one replica's reading of each state; active and delayed apart).
 */
function expectBacklogQuery(query: string, namespace: string, queue: string): void {
  const held = (ns: string, q: string, n: number) => ({
    series: `media_queue_jobs{job="media-api", namespace="${ns}", instance="api-0:3000", queue="${q}", state="held"}`,
    values: `${n}x5`,
  });
  expectPromqlAnswer(
    query,
    [
      ...queueJobsMidUpgrade({ namespace, queue }),
      held(`${namespace}-other`, queue, 100),
      held(namespace, `${queue}-other`, 50),
    ],
    [{ labels: '{}', value: BACKLOG_MID_UPGRADE }],
  );
}

/** The keys of the Secret media-secrets (generated in dev, external in prod). */
const SECRET_KEYS = [
  'MONGODB_URI',
  'REDIS_URL',
  'REDIS_ADDRESS',
  'REDIS_PASSWORD',
  'S3_ACCESS_KEY',
  'S3_SECRET_KEY',
  'METRICS_TOKEN',
  'DASHBOARD_USER',
  'DASHBOARD_PASSWORD',
];
/** Values standing in for prod's external Secret when its configuration is checked. */
const PROD_SECRET_STAND_IN: Record<string, string> = {
  MONGODB_URI: 'mongodb://mongodb.example:27017/media',
  REDIS_URL: 'rediss://:x@redis.example:6380',
  REDIS_ADDRESS: 'redis.example:6380',
  REDIS_PASSWORD: 'x',
  S3_ACCESS_KEY: 'x',
  S3_SECRET_KEY: 'x',
  METRICS_TOKEN: 'x',
  DASHBOARD_USER: 'x',
  DASHBOARD_PASSWORD: 'x',
};

/** A rendered object: its kind and name; the rest is read through the packages' own types. */
interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string> };
  data?: Record<string, string>;
}
/** The types of the kinds read field by field below. */
interface Kinds {
  Deployment: IDeployment;
  CronJob: ICronJob;
  Service: IService;
  Ingress: IIngress;
  PodDisruptionBudget: IPodDisruptionBudget;
  HorizontalPodAutoscaler: IHorizontalPodAutoscaler;
  NetworkPolicy: INetworkPolicy;
  ScaledObject: IScaledObject;
  TriggerAuthentication: ITriggerAuthentication;
}
interface PodTemplate {
  owner: K8sObject;
  labels: Record<string, string>;
  spec: IPodSpec;
}

// ---- rendering -----------------------------------------------------------------------------

let kubectlChecked: string | undefined;

/** kubectl's kustomize version, or an error saying what to install. */
function checkKubectl(): string {
  if (kubectlChecked) return kubectlChecked;
  const install =
    'Install kubectl 1.27 or newer (it embeds kustomize v5), e.g. from the Kubernetes apt ' +
    'repository or the Google Cloud CLI package, or point KUBECTL at one.';
  const run = spawnSync(KUBECTL, ['version', '--client', '-o', 'json'], { encoding: 'utf8' });
  if (run.error || run.status !== 0) {
    throw new Error(
      `kubectl is needed to render deploy/kubernetes (\`${KUBECTL} version --client\` failed: ` +
        `${run.error?.message ?? run.stderr.trim()}). ${install}`,
    );
  }
  const version = (JSON.parse(run.stdout) as { kustomizeVersion?: string }).kustomizeVersion;
  if (!version || !/^v([5-9]|\d{2,})\./.test(version)) {
    throw new Error(
      `kubectl's kustomize is ${version ?? 'missing'}; deploy/kubernetes needs kustomize v5. ${install}`,
    );
  }
  kubectlChecked = version;
  return version;
}

const rendered = new Map<Overlay, K8sObject[]>();

function render(overlay: Overlay): K8sObject[] {
  const cached = rendered.get(overlay);
  if (cached) return cached;
  checkKubectl();
  const dir = join(root, 'deploy', 'kubernetes', 'overlays', overlay);
  const run = spawnSync(KUBECTL, ['kustomize', dir], { encoding: 'utf8', maxBuffer: 16 << 20 });
  if (run.status !== 0) throw new Error(`kubectl kustomize ${dir} failed:\n${run.stderr}`);
  const objects = parseAllDocuments(run.stdout).map((doc) => {
    if (doc.errors.length) throw doc.errors[0]!;
    return doc.toJS() as K8sObject;
  });
  rendered.set(overlay, objects);
  return objects;
}

function all<K extends keyof Kinds>(overlay: Overlay, kind: K): (Kinds[K] & K8sObject)[] {
  return render(overlay).filter((o) => o.kind === kind) as (Kinds[K] & K8sObject)[];
}
function one<K extends keyof Kinds>(overlay: Overlay, kind: K, name: string): Kinds[K] & K8sObject {
  const found = all(overlay, kind).find((o) => o.metadata.name === name);
  if (!found) throw new Error(`${overlay}: no ${kind} ${name}`);
  return found;
}
/** Generated ConfigMaps and Secrets carry a hash suffix: find them by their base name. */
function generated(overlay: Overlay, kind: 'ConfigMap' | 'Secret', name: string) {
  return render(overlay).find(
    (o) => o.kind === kind && (o.metadata.name === name || o.metadata.name.startsWith(`${name}-`)),
  );
}
const containerOf = (d: IDeployment): IContainer => d.spec!.template.spec!.containers[0]!;

function podTemplates(overlay: Overlay): PodTemplate[] {
  return [
    ...all(overlay, 'Deployment').map((d) => ({
      owner: d,
      labels: d.spec!.template.metadata!.labels!,
      spec: d.spec!.template.spec!,
    })),
    ...all(overlay, 'CronJob').map((c) => ({
      owner: c,
      labels: c.spec!.jobTemplate.spec!.template.metadata!.labels!,
      spec: c.spec!.jobTemplate.spec!.template.spec!,
    })),
  ];
}

/** A container's environment as the kubelet builds it: envFrom in order, then env. */
function environment(overlay: Overlay, container: IContainer): Record<string, string> {
  const env: Record<string, string> = {};
  for (const source of container.envFrom ?? []) {
    const configMap = source.configMapRef?.name;
    if (configMap) {
      const cm = render(overlay).find(
        (o) => o.kind === 'ConfigMap' && o.metadata.name === configMap,
      );
      if (!cm) throw new Error(`${overlay}: ConfigMap ${configMap} is not rendered`);
      Object.assign(env, cm.data);
    }
    const secretName = source.secretRef?.name;
    if (secretName) {
      const secret = render(overlay).find(
        (o) => o.kind === 'Secret' && o.metadata.name === secretName,
      );
      if (secret) {
        for (const [k, v] of Object.entries(secret.data ?? {}))
          env[k] = Buffer.from(v, 'base64').toString('utf8');
      } else {
        // Only prod's external Secret may be absent from the rendering.
        expect({ overlay, secret: secretName }).toEqual({
          overlay: 'prod',
          secret: 'media-secrets',
        });
        Object.assign(env, PROD_SECRET_STAND_IN);
      }
    }
  }
  for (const { name, value } of container.env ?? []) env[name] = value ?? '';
  return env;
}

const BYTES: Record<string, number> = {
  '': 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  Ki: 1024,
  Mi: 1024 ** 2,
  Gi: 1024 ** 3,
};
function bytesOf(quantity: string | number | undefined): number {
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|k|M|G)?$/.exec(String(quantity));
  if (!m) throw new Error(`unexpected memory quantity ${quantity}`);
  return Number(m[1]) * BYTES[m[2] ?? '']!;
}
const MiB = 1024 ** 2;

// ---- schemas -------------------------------------------------------------------------------

type Validating = new (data: never) => { validate(): void };
const SCHEMAS: Record<string, Validating> = {
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'batch/v1/CronJob': CronJob,
  'networking.k8s.io/v1/Ingress': Ingress,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'keda.sh/v1alpha1/ScaledObject': ScaledObject,
  'keda.sh/v1alpha1/TriggerAuthentication': TriggerAuthentication,
};

/** Throws the schema's message when `object` does not validate. */
function validate(object: unknown): void {
  const o = object as K8sObject;
  const Model = SCHEMAS[`${o.apiVersion}/${o.kind}`];
  if (!Model) throw new Error(`no schema for ${o.apiVersion} ${o.kind} in this test`);
  new Model(object as never).validate();
}
function validationError(object: unknown): string | null {
  try {
    validate(object);
    return null;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

type Tree = Record<string | number, unknown>;

/**
 * Property paths the schema does not know. The schemas allow extra
 * properties, so each property in turn is given a value no schema type
 * accepts (an array of an array): where validation still passes, the schema
 * has no rule for that property, so the name is not one Kubernetes knows.
 */
function unknownFields(object: unknown): string[] {
  const unknown: string[] = [];
  const visit = (node: unknown, path: (string | number)[]) => {
    if (Array.isArray(node)) node.forEach((item, i) => visit(item, [...path, i]));
    else if (node && typeof node === 'object') {
      for (const [key, value] of Object.entries(node)) {
        const probe = structuredClone(object) as Tree;
        let parent = probe;
        for (const step of path) parent = parent[step] as Tree;
        parent[key] = [[]];
        if (validationError(probe) === null) unknown.push([...path, key].join('.'));
        else visit(value, [...path, key]);
      }
    }
  };
  visit(object, []);
  return unknown;
}

/** Sets a property deep inside a copy of a rendered object (to feed the checks bad input). */
function withField(object: unknown, path: (string | number)[], value: unknown): Tree {
  const copy = structuredClone(object) as Tree;
  let parent = copy;
  for (const step of path.slice(0, -1)) parent = parent[step] as Tree;
  const last = path.at(-1)!;
  if (value === undefined) delete parent[last];
  else parent[last] = value;
  return copy;
}

// ---- the tests -----------------------------------------------------------------------------

it('kubectl with kustomize v5 is installed (needed to render the overlays)', () => {
  expect(checkKubectl()).toMatch(/^v\d+\./);
});

it('the schemas refuse a wrong type or a missing field, in Kubernetes and KEDA objects', () => {
  const grace = ['spec', 'template', 'spec', 'terminationGracePeriodSeconds'];
  expect(validationError(withField(one('dev', 'Deployment', 'media-api'), grace, 'forty'))).toMatch(
    /terminationGracePeriodSeconds/,
  );
  const scaled = withField(
    one('dev', 'ScaledObject', 'media-worker-pdf'),
    ['spec', 'scaleTargetRef'],
    undefined,
  );
  expect(validationError(scaled)).toMatch(/scaleTargetRef/);
  const key = ['spec', 'secretTargetRef', 0, 'key'];
  expect(
    validationError(withField(one('dev', 'TriggerAuthentication', 'media-redis'), key, 42)),
  ).toMatch(/secretTargetRef/);
});

it('the unknown-field check catches a misspelt field', () => {
  const deployment = one('dev', 'Deployment', 'media-api');
  expect(unknownFields(deployment)).toEqual([]);
  const misspelt = withField(
    withField(
      deployment,
      ['spec', 'template', 'spec', 'containers', 0, 'securityContext', 'readOnlyRootFilesytem'],
      true,
    ),
    ['spec', 'template', 'spec', 'terminationGracePeriodSecond'],
    40,
  );
  expect(unknownFields(misspelt)).toEqual([
    'spec.template.spec.containers.0.securityContext.readOnlyRootFilesytem',
    'spec.template.spec.terminationGracePeriodSecond',
  ]);
});

describe.each(OVERLAYS)('overlay %s', (overlay) => {
  it('renders every object the deployment needs', () => {
    const names = (kind: keyof Kinds) => all(overlay, kind).map((o) => o.metadata.name);
    expect(names('Deployment').sort()).toEqual([
      'media-api',
      'media-worker-image',
      'media-worker-pdf',
    ]);
    expect(names('Service')).toEqual(['media-api']);
    expect(names('Ingress')).toEqual(['media-api']);
    expect(names('PodDisruptionBudget')).toEqual(['media-api']);
    expect(names('HorizontalPodAutoscaler')).toEqual(['media-api']);
    expect(names('ScaledObject').sort()).toEqual(['media-worker-image', 'media-worker-pdf']);
    expect(names('TriggerAuthentication')).toEqual(['media-redis']);
    expect(names('CronJob')).toEqual(['media-reconcile']);
    expect(names('NetworkPolicy').length).toBeGreaterThanOrEqual(3);
    expect(generated(overlay, 'ConfigMap', 'media-config')).toBeDefined();
    expect(generated(overlay, 'ConfigMap', 'media-reconcile')).toBeDefined();
    for (const o of render(overlay)) {
      const name = `${o.kind}/${o.metadata.name}`;
      const partOf = o.metadata.labels?.['app.kubernetes.io/part-of'];
      expect({ name, partOf }).toEqual({ name, partOf: 'media' });
    }
  });

  it('every object validates against the Kubernetes and KEDA schemas, with no unknown field', () => {
    for (const object of render(overlay)) {
      const name = `${object.kind}/${object.metadata.name}`;
      expect({ name, error: validationError(object) }).toEqual({ name, error: null });
      expect({ name, unknown: unknownFields(object) }).toEqual({ name, unknown: [] });
    }
  });

  it('the Secret holds the credentials and the ConfigMaps none of them', () => {
    const secret = generated(overlay, 'Secret', 'media-secrets');
    if (overlay === 'dev') {
      expect(Object.keys(secret!.data ?? {}).sort()).toEqual([...SECRET_KEYS].sort());
      // KEDA's Redis address and password name the server of REDIS_URL.
      const env = Object.fromEntries(
        Object.entries(secret!.data!).map(([k, v]) => [k, Buffer.from(v, 'base64').toString()]),
      );
      const url = new URL(env.REDIS_URL!);
      expect(env.REDIS_ADDRESS).toBe(`${url.hostname}:${url.port || '6379'}`);
      expect(env.REDIS_PASSWORD).toBe(decodeURIComponent(url.password));
    } else {
      // External: named in the overlay's notes and the README, key by key.
      expect(secret).toBeUndefined();
      const notes = read('deploy/kubernetes/overlays/prod/kustomization.yaml');
      const readme = read('README.md');
      const scale = readme.slice(readme.indexOf('## Running at scale'));
      for (const key of SECRET_KEYS) {
        expect({ key, inNotes: notes.includes(key) }).toEqual({ key, inNotes: true });
        expect({ key, inReadme: scale.includes(key) }).toEqual({ key, inReadme: true });
      }
    }
    for (const cm of render(overlay).filter((o) => o.kind === 'ConfigMap')) {
      for (const key of SECRET_KEYS) expect(Object.keys(cm.data ?? {})).not.toContain(key);
    }
  });

  it('each container has a valid production configuration', () => {
    for (const { owner, spec } of podTemplates(overlay)) {
      for (const container of spec.containers) {
        const env = environment(overlay, container);
        const name = owner.metadata.name;
        expect({ name, NODE_ENV: env.NODE_ENV }).toEqual({ name, NODE_ENV: 'production' });
        expect(() => loadConfig(env)).not.toThrow();
      }
    }
  });

  it('one worker Deployment per pool (image, with the light maintenance jobs; pdf), every queue in one', () => {
    const workers = all(overlay, 'Deployment').filter((d) => d.metadata.name !== 'media-api');
    const queues = workers.flatMap((d) => {
      const config = loadConfig(environment(overlay, containerOf(d)));
      expect(d.metadata.name).toBe(`media-worker-${config.worker.queues[0]}`);
      return config.worker.queues;
    });
    expect(queues.sort()).toEqual([...QUEUE_NAMES].sort());
  });

  it('every pod runs non-root, read-only, without capabilities, under RuntimeDefault seccomp', () => {
    for (const { owner, spec } of podTemplates(overlay)) {
      const name = owner.metadata.name;
      const seccomp = spec.securityContext?.seccompProfile?.type;
      expect({ name, seccomp }).toEqual({ name, seccomp: 'RuntimeDefault' });
      expect(spec.automountServiceAccountToken).toBe(false);
      for (const c of spec.containers) {
        const sc = c.securityContext ?? {};
        expect({ name, c: c.name, ...sc }).toMatchObject({
          name,
          c: c.name,
          allowPrivilegeEscalation: false,
          readOnlyRootFilesystem: true,
          capabilities: { drop: ['ALL'] },
        });
        expect(sc.capabilities?.add ?? []).toEqual([]);
        expect(sc.privileged ?? false).toBe(false);
        expect(sc.runAsNonRoot ?? spec.securityContext?.runAsNonRoot).toBe(true);
        // A numeric non-root user, so the kubelet can check runAsNonRoot on the `node` user.
        expect(sc.runAsUser ?? spec.securityContext?.runAsUser).toBeGreaterThan(0);
        // os.tmpdir() (qpdf's repairs) is writable through an emptyDir.
        const tmp = c.volumeMounts?.find((m) => m.mountPath === '/tmp');
        expect(tmp).toBeDefined();
        expect(spec.volumes?.find((v) => v.name === tmp!.name)?.emptyDir).toBeDefined();
      }
    }
  });

  it('probes: liveness on /healthz, readiness on /readyz, on the port the process listens on', () => {
    for (const d of all(overlay, 'Deployment')) {
      const c = containerOf(d);
      const config = loadConfig(environment(overlay, c));
      const port = d.metadata.name === 'media-api' ? config.port : config.worker.port;
      const probe = (p: IProbe | undefined) => {
        const at = p?.httpGet?.port;
        return {
          path: p?.httpGet?.path,
          port: typeof at === 'number' ? at : c.ports?.find((x) => x.name === at)?.containerPort,
        };
      };
      const name = d.metadata.name;
      expect({ name, ...probe(c.livenessProbe) }).toEqual({ name, path: '/healthz', port });
      expect({ name, ...probe(c.startupProbe) }).toEqual({ name, path: '/healthz', port });
      expect({ name, ...probe(c.readinessProbe) }).toEqual({ name, path: '/readyz', port });
      // /readyz bounds each check by 2 s (docs/operations.md): the probe waits longer.
      expect(c.readinessProbe!.timeoutSeconds).toBeGreaterThan(2);
    }
  });

  it('every pod has more grace than the shutdown timeout (plus its preStop pause)', () => {
    for (const { owner, spec } of podTemplates(overlay)) {
      if (owner.kind === 'CronJob') continue; // runs to completion; no shutdown budget
      const c = spec.containers[0]!;
      const { shutdownTimeoutMs } = loadConfig(environment(overlay, c));
      // The configured budget, or the default in shared/config/variables.ts when unset.
      expect(shutdownTimeoutMs).toBeGreaterThanOrEqual(loadConfig({}).shutdownTimeoutMs);
      const preStop = c.lifecycle?.preStop?.exec?.command;
      const pauseMs = preStop?.[0] === 'sleep' ? Number(preStop[1]) * 1000 : 0;
      const name = owner.metadata.name;
      const graceMs = (spec.terminationGracePeriodSeconds ?? 30) * 1000;
      expect({ name, enough: graceMs > shutdownTimeoutMs + pauseMs }).toEqual({
        name,
        enough: true,
      });
    }
  });

  it('every container sets CPU and memory requests and limits', () => {
    for (const { owner, spec } of podTemplates(overlay)) {
      for (const c of spec.containers) {
        const name = owner.metadata.name;
        for (const kind of ['requests', 'limits'] as const) {
          const set = Object.keys(c.resources?.[kind] ?? {}).sort();
          expect({ name, kind, set }).toEqual({ name, kind, set: ['cpu', 'memory'] });
        }
        expect(bytesOf(c.resources!.limits!.memory)).toBeGreaterThanOrEqual(
          bytesOf(c.resources!.requests!.memory),
        );
      }
    }
  });

  it("the PDF pool's memory limit holds the documented merge bound for its concurrency", () => {
    // docs/jobs.md: "a merge grows a process's RSS by at most 32 MiB + 128 KiB per merged page,
    // the inputs' own bytes on top"; at the adapter's limits (pages, input bytes).
    const bound = /\*\*(\d+) MiB \+ (\d+) KiB per merged page\*\*/.exec(read('docs/jobs.md'));
    expect(bound).not.toBeNull();
    const perMerge =
      Number(bound![1]) * MiB +
      Number(bound![2]) * 1024 * PDF_MERGE_DEFAULTS.maxPages +
      PDF_MERGE_DEFAULTS.maxInputBytes;
    // A worker's RSS between jobs: the largest "worker RSS before" of docs/benchmarks.md's merge table.
    const table = read('docs/benchmarks.md').split('\n');
    const header = table.findIndex((l) => l.includes('| worker RSS before, MiB |'));
    expect(header).toBeGreaterThan(0);
    const column = table[header]!.split('|').findIndex(
      (c) => c.trim() === 'worker RSS before, MiB',
    );
    const rows = table.slice(header + 2);
    const end = rows.findIndex((l) => !l.startsWith('|'));
    // That table's rows only (the page's later tables have other columns).
    const baseline = Math.max(
      ...rows
        .slice(0, end < 0 ? undefined : end)
        .flatMap((l) => (l.split('|')[column] ?? '').match(/\d+(\.\d+)?/g) ?? [])
        .map(Number),
    );
    expect(baseline).toBeGreaterThan(100);

    const c = containerOf(one(overlay, 'Deployment', 'media-worker-pdf'));
    const concurrency = loadConfig(environment(overlay, c)).worker.concurrency.pdf;
    const limit = bytesOf(c.resources!.limits!.memory);
    expect(limit).toBeGreaterThanOrEqual(baseline * MiB + concurrency * perMerge);
  });

  it('the API scales on CPU with an HPA; KEDA scales each worker pool on its BullMQ lists', () => {
    const hpas = all(overlay, 'HorizontalPodAutoscaler');
    const scaled = all(overlay, 'ScaledObject');
    // Nothing is driven by both an HPA and KEDA.
    const hpaTargets = hpas.map((h) => h.spec!.scaleTargetRef.name);
    for (const so of scaled) expect(hpaTargets).not.toContain(so.spec.scaleTargetRef.name);
    expect(hpaTargets).toEqual(['media-api']);
    expect(hpas[0]!.spec!.metrics?.map((m) => [m.type, m.resource?.name])).toEqual([
      ['Resource', 'cpu'],
    ]);
    expect(hpas[0]!.spec!.minReplicas).toBeGreaterThanOrEqual(1);
    // No replicas field on a Deployment an autoscaler owns (a re-apply would reset it).
    for (const d of all(overlay, 'Deployment')) expect(d.spec!.replicas).toBeUndefined();

    for (const so of scaled) {
      const spec = so.spec;
      const c = containerOf(one(overlay, 'Deployment', spec.scaleTargetRef.name));
      const config = loadConfig(environment(overlay, c));
      const queue = config.worker.queues[0]!;
      expect(spec.minReplicaCount).toBeGreaterThanOrEqual(queue === 'pdf' ? 0 : 1);
      expect(spec.maxReplicaCount).toBeGreaterThanOrEqual(Math.max(1, spec.minReplicaCount!));
      expect(spec.triggers.map((t) => [t.name, t.type, t.metadata.listName])).toEqual([
        [`${queue}-wait`, 'redis', `${config.queuePrefix}:${queue}:wait`],
        [`${queue}-active`, 'redis', `${config.queuePrefix}:${queue}:active`],
        [`${queue}-backlog`, 'prometheus', undefined],
      ]);
      for (const t of spec.triggers.filter((x) => x.type === 'redis')) {
        // One replica per WORKER_CONCURRENCY jobs.
        expect(Number(t.metadata.listLength)).toBe(config.worker.concurrency[queue]);
        // TLS as REDIS_URL says (prod's URL comes from its external Secret: either is allowed).
        expect(['true', 'false']).toContain(t.metadata.enableTLS);
        if (overlay === 'dev')
          expect(t.metadata.enableTLS).toBe(String(config.redisUrl!.startsWith('rediss:')));
        const auth = one(overlay, 'TriggerAuthentication', t.authenticationRef!.name);
        const refs = auth.spec.secretTargetRef!;
        expect(refs.map((r) => [r.parameter, r.key]).sort()).toEqual([
          ['address', 'REDIS_ADDRESS'],
          ['password', 'REDIS_PASSWORD'],
        ]);
        // The same Secret the pods read.
        for (const r of refs) expect(c.envFrom!.map((e) => e.secretRef?.name)).toContain(r.name);
      }
      // The backlog: waiting and held jobs (the fair gate holds most of a backlog in BullMQ's
      // :delayed sorted set, which the Redis scaler cannot read), one replica per
      // WORKER_CONCURRENCY of them, read from Prometheus.
      const backlog = spec.triggers[2]!;
      expect(Number(backlog.metadata.threshold)).toBe(config.worker.concurrency[queue]);
      expect(backlog.metadata.activationThreshold).toBe('0');
      expect(new URL(backlog.metadata.serverAddress!).protocol).toMatch(/^https?:$/);
      expectBacklogQuery(backlog.metadata.query!, so.metadata.namespace!, queue);
    }
    expect(one(overlay, 'ScaledObject', 'media-worker-pdf').spec.minReplicaCount).toBe(0);
  });

  it('network policies: the API takes 3000, workers only their metrics port, the rest nothing', () => {
    const policies = all(overlay, 'NetworkPolicy');
    for (const { owner, labels, spec } of podTemplates(overlay)) {
      const applying = policies.filter((p) =>
        Object.entries(p.spec!.podSelector.matchLabels ?? {}).every(([k, v]) => labels[k] === v),
      );
      expect(applying.some((p) => p.spec!.policyTypes?.includes('Ingress'))).toBe(true);
      const ports = applying.flatMap((p) =>
        (p.spec!.ingress ?? []).flatMap((rule) => {
          // A rule without ports would open every port.
          expect(rule.ports?.length).toBeGreaterThan(0);
          return (rule.ports ?? []).map((x) => x.port);
        }),
      );
      const config = loadConfig(environment(overlay, spec.containers[0]!));
      const name = owner.metadata.name;
      const expected =
        name === 'media-api'
          ? [config.port]
          : owner.kind === 'Deployment'
            ? [config.worker.port]
            : [];
      expect({ name, ports }).toEqual({ name, ports: expected });
    }
  });

  it('the Service, the Ingress and the PDB point at the API, and /metrics is not routed', () => {
    const labels = one(overlay, 'Deployment', 'media-api').spec!.template.metadata!.labels!;
    const service = one(overlay, 'Service', 'media-api');
    for (const [k, v] of Object.entries(service.spec!.selector!)) expect(labels[k]).toBe(v);
    const pdb = one(overlay, 'PodDisruptionBudget', 'media-api');
    for (const [k, v] of Object.entries(pdb.spec!.selector!.matchLabels!))
      expect(labels[k]).toBe(v);
    const ingress = one(overlay, 'Ingress', 'media-api');
    const paths = ingress.spec!.rules!.flatMap((r) => r.http!.paths);
    expect(paths.length).toBeGreaterThan(0);
    for (const p of paths) {
      expect(p.backend.service!.name).toBe('media-api');
      expect(service.spec!.ports!.map((x) => x.name)).toContain(p.backend.service!.port!.name);
      for (const internal of ['/metrics', '/healthz', '/readyz', '/admin/queues'])
        expect({ path: p.path, internal, routed: internal.startsWith(p.path!) }).toEqual({
          path: p.path,
          internal,
          routed: false,
        });
    }
  });

  it('reconcile runs daily, report only, from the compiled CLI, and pushes its findings', () => {
    const cron = one(overlay, 'CronJob', 'media-reconcile');
    expect(cron.spec!.concurrencyPolicy).toBe('Forbid');
    const c = cron.spec!.jobTemplate.spec!.template.spec!.containers[0]!;
    expect(c.image).toBe(containerOf(one(overlay, 'Deployment', 'media-api')).image);
    // The production image has no tsx: the build emits dist/api/cli.js from api/cli.ts.
    expect(c.command).toEqual(['node', '--enable-source-maps', 'dist/api/cli.js']);
    const build = JSON.parse(read('tsconfig.build.json')) as { include: string[] };
    expect(build.include).toContain('api');
    expect(read('api/cli.ts')).toMatch(/require\.main === module/);
    expect(c.args![0]).toBe('reconcile');
    expect(c.args).not.toContain('--fix');
    expect(c.args).not.toContain('--remove');
    expect(c.args).toContain('--pushgateway');
    // Every $(VAR) the kubelet expands is in the container's environment.
    const env = environment(overlay, c);
    for (const arg of c.args!)
      for (const [, name] of arg.matchAll(/\$\(([A-Z0-9_]+)\)/g)) expect(env[name!]).toBeTruthy();
    expect(env.PUSHGATEWAY_URL).toMatch(/^https?:\/\//);
  });
});

it('prod pins its images and runs more replicas than dev', () => {
  for (const { spec } of podTemplates('prod'))
    for (const c of spec.containers)
      expect(c.image).toMatch(/^[a-z0-9.-]+\/[^:@]+(:(?!latest$)[\w.-]+|@sha256:[0-9a-f]{64})$/);
  for (const { spec } of podTemplates('dev'))
    for (const c of spec.containers) {
      expect(c.image).toMatch(/:dev$/);
      expect(c.imagePullPolicy).toBe('IfNotPresent');
    }
  const hpa = (o: Overlay) => one(o, 'HorizontalPodAutoscaler', 'media-api').spec!;
  expect(hpa('prod').minReplicas).toBeGreaterThan(hpa('dev').minReplicas!);
  expect(hpa('prod').maxReplicas).toBeGreaterThan(hpa('dev').maxReplicas);
  for (const pool of ['media-worker-image', 'media-worker-pdf']) {
    const so = (o: Overlay) => one(o, 'ScaledObject', pool).spec;
    expect(so('prod').maxReplicaCount).toBeGreaterThan(so('dev').maxReplicaCount!);
    expect(so('prod').minReplicaCount).toBeGreaterThanOrEqual(so('dev').minReplicaCount!);
  }
  // dev requests less; prod's PDF pool requests its whole limit.
  const pdf = (o: Overlay) => containerOf(one(o, 'Deployment', 'media-worker-pdf')).resources!;
  expect(pdf('prod').requests!.memory).toBe(pdf('prod').limits!.memory);
  expect(bytesOf(pdf('dev').requests!.memory)).toBeLessThan(bytesOf(pdf('prod').requests!.memory));
});
