/**
 * Consistency under races, through the real API, Redis, S3 and MongoDB:
 *
 * - the first concurrent uploads of an organization that has a quota but no
 *   usage count yet are all counted (none refused as "over quota");
 */
import sharp from 'sharp';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { form } from '../../support/files';
import { expectMatchesSpec } from '../../support/openapi';

type Json = Record<string, unknown>;

let api: TestApi;
/** A small PNG (a few hundred bytes), each call a distinct one. */
let seed = 0;
const smallPng = () =>
  sharp({
    create: { width: 8, height: 8, channels: 3, background: { r: seed++ % 256, g: 0, b: 0 } },
  })
    .png()
    .toBuffer();

beforeAll(async () => {
  api = await startApi('races');
});
afterAll(async () => {
  await api.close();
});

async function upload(
  org: TestOrg,
  bytes: Buffer,
  name: string,
  fields: [string, string][] = [],
): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${api.url}/media/upload`, {
    method: 'POST',
    headers: org.auth,
    body: form([...fields, ['file', bytes, name]]),
  });
  const body = (await res.json()) as Json;
  expectMatchesSpec('POST', '/media/upload', res.status, body, res.headers);
  return { status: res.status, body };
}

const recordsOf = (org: TestOrg) =>
  api.ctx.models.Media.find({ organizationId: org.organization.id }).lean();

describe('quota: the first uploads of an organization', () => {
  it('counts eight concurrent small uploads of an organization with a quota and no usage yet (all 201)', async () => {
    const org = await api.createOrg('first-uploads');
    await api.ctx.organizations.setQuota(org.organization.id, 1024 * 1024);
    // No usage count exists yet: the first reservations race to create it.
    expect(await api.ctx.models.Usage.countDocuments({ _id: org.organization.id })).toBe(0);
    const files = await Promise.all(Array.from({ length: 8 }, () => smallPng()));
    const answers = await Promise.all(files.map((f, i) => upload(org, f, `first-${i}.png`)));
    expect(answers.map((a) => [a.status, a.body.error])).toEqual(
      Array.from({ length: 8 }, () => [201, undefined]),
    );
    const bytes = files.reduce((n, f) => n + f.length, 0);
    expect(await api.ctx.repositories.usage.get(org.organization.id)).toEqual({ bytes, files: 8 });
    expect(await recordsOf(org)).toHaveLength(8);
  });
});
