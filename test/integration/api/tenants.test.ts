/**
 * Tenant isolation and concurrency: two organizations' folders of the same
 * name stay apart, each under its own prefix; 50 concurrent uploads from
 * several organizations all land with unique ids and keys. (That neither can
 * reach the other's keys, folders or jobs, on every endpoint, is
 * tenant-matrix.test.ts.)
 */
import { startApi, type TestApi, type TestOrg, type UploadedMedia } from '../../support/api';

let api: TestApi;
let alpha: TestOrg;
let beta: TestOrg;

beforeAll(async () => {
  api = await startApi('tenants', {
    // Many concurrent uploads per token are what this file makes; the per-token cap has its own test.
    env: { MAX_UPLOADS_IN_FLIGHT: '1000' },
  });
  alpha = await api.createOrg('alpha');
  beta = await api.createOrg('beta');
});
afterAll(() => api.close());

describe('tenant isolation', () => {
  let alphaMedia: UploadedMedia;

  beforeAll(async () => {
    alphaMedia = await alpha.uploadRecord('Canon_40D.jpg', 'secret.jpg', { folder: 'private' });
  });

  it('keeps folders of the same name apart, each under its own prefix', async () => {
    const theirs = await beta.uploadRecord('Canon_40D.jpg', 'secret.jpg', { folder: 'private' });
    const folderOf = async (id: number) =>
      (await api.ctx.models.Media.findOne({ id }).lean())?.folderId;
    expect(await folderOf(theirs.id)).not.toBe(await folderOf(alphaMedia.id));
    expect(theirs.key).toMatch(/^beta\/private\//);
    expect(theirs.organizationId).toBe(beta.organization.id);
  });
});

describe('50 concurrent uploads from several organizations', () => {
  it('records every one, with unique ids and keys', async () => {
    const orgs = [alpha, beta, await api.createOrg('gamma'), await api.createOrg('delta')];
    const files = [
      'Canon_40D.jpg',
      'xmp-BlueSquare.jpg',
      'minimal-document.pdf',
      'heic-samplefilehub.heif',
    ];
    // Each answers 201 (uploadRecord fails the test otherwise).
    const media = await Promise.all(
      Array.from({ length: 50 }, (_, i) => {
        const org = orgs[i % orgs.length]!;
        const name = files[i % files.length]!;
        return org.uploadRecord(name, name, i % 3 === 0 ? { folder: `batch-${i % 2}` } : {});
      }),
    );
    expect(new Set(media.map((m) => m.id)).size).toBe(50);
    expect(new Set(media.map((m) => m.key)).size).toBe(50);
    for (const m of media) {
      const org = orgs.find((o) => o.organization.id === m.organizationId)!;
      expect(m.key.startsWith(`${org.organization.slug}/`)).toBe(true);
    }
    const ids = media.map((m) => m.id);
    expect(await api.ctx.models.Media.countDocuments({ id: { $in: ids } })).toBe(50);
    const stored = new Set(await api.objectKeys());
    for (const m of media) expect(stored.has(m.key)).toBe(true);
    // One folder per organization and name, despite the races.
    const folders = await api.ctx.models.Folder.find({}, { organizationId: 1, name: 1 }).lean();
    const pairs = folders.map((f) => `${f.organizationId}/${f.name}`);
    expect(new Set(pairs).size).toBe(pairs.length);
  });
});
