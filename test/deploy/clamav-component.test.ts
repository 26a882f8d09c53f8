/**
 * deploy/kubernetes/components/clamav, the optional malware-scanning
 * component: an overlay that adds it (here, prod's, in a temporary overlay
 * rendered by `kubectl kustomize`) gets clamd's Deployment, Service and
 * NetworkPolicy, valid against the Kubernetes schemas, and CLAMD_URL in the
 * configuration every container reads, pointing at that Service; the
 * workers, and only they, may reach it.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { Deployment, type IDeployment } from 'kubernetes-models/apps/v1';
import { NetworkPolicy, type INetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { ConfigMap, Service, type IConfigMap, type IService } from 'kubernetes-models/v1';
import { parseAllDocuments } from 'yaml';
import { clamdAddress } from '../../shared/scan/clamd-scanner';

const KUBECTL = process.env.KUBECTL || 'kubectl';
const kubernetes = join(__dirname, '..', '..', 'deploy', 'kubernetes');

type Obj = { kind: string; metadata: { name: string } };

function renderWithComponent(): Obj[] {
  const dir = mkdtempSync(join(tmpdir(), 'media-clamav-overlay-'));
  try {
    const rel = relative(dir, kubernetes);
    writeFileSync(
      join(dir, 'kustomization.yaml'),
      [
        'apiVersion: kustomize.config.k8s.io/v1beta1',
        'kind: Kustomization',
        'resources:',
        `  - ${rel}/overlays/prod`,
        'components:',
        `  - ${rel}/components/clamav`,
        '',
      ].join('\n'),
    );
    const run = spawnSync(KUBECTL, ['kustomize', dir], { encoding: 'utf8', maxBuffer: 16 << 20 });
    if (run.error || run.status !== 0) {
      throw new Error(`kubectl kustomize failed: ${run.error?.message ?? run.stderr}`);
    }
    return parseAllDocuments(run.stdout).map((d) => d.toJS() as Obj);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('the clamav component', () => {
  const objects = renderWithComponent();
  const named = <T>(kind: string, name: string) =>
    objects.find((o) => o.kind === kind && o.metadata.name.startsWith(name)) as T & Obj;

  it('adds clamd (Deployment, Service, NetworkPolicy), valid against the schemas', () => {
    const deployment = named<IDeployment>('Deployment', 'media-clamd');
    const service = named<IService>('Service', 'media-clamd');
    const policy = named<INetworkPolicy>('NetworkPolicy', 'media-clamd-ingress');
    expect(() => new Deployment(deployment).validate()).not.toThrow();
    expect(() => new Service(service).validate()).not.toThrow();
    expect(() => new NetworkPolicy(policy).validate()).not.toThrow();
    const container = deployment.spec!.template.spec!.containers[0]!;
    expect(container.ports).toEqual([{ name: 'clamd', containerPort: 3310, protocol: 'TCP' }]);
    expect(container.readinessProbe).toBeDefined();
    expect(policy.spec!.ingress![0]!.from![0]!.podSelector!.matchLabels).toMatchObject({
      'app.kubernetes.io/component': 'worker',
    });
  });

  it('sets CLAMD_URL, for every container, to that Service', () => {
    const config = named<IConfigMap>('ConfigMap', 'media-config');
    expect(() => new ConfigMap(config).validate()).not.toThrow();
    const url = config.data!.CLAMD_URL!;
    const service = named<IService>('Service', 'media-clamd');
    expect(clamdAddress(url)).toEqual({
      host: service.metadata.name,
      port: service.spec!.ports![0]!.port,
    });
  });
});
