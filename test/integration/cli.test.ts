/**
 * The operator CLI, run as operators run it (`npm run --silent cli -- …`):
 * JSON on stdout, errors on stderr with a non-zero exit, and tokens that the
 * API accepts until they are revoked.
 */
import { runCli } from '../support/cli';
import { startApi, type TestApi } from '../support/api';

let api: TestApi;
beforeAll(async () => {
  api = await startApi('cli');
});
afterAll(() => api.close());

const cli = (...args: string[]) => runCli(api.env.env, ...args);

/** The CLI's JSON error line (npm itself may warn on stderr too). */
const errorOf = (stderr: string): unknown => {
  const line = stderr.split('\n').find((l) => l.startsWith('{'));
  if (!line) throw new Error(`no JSON error on stderr: ${stderr}`);
  return JSON.parse(line);
};

const download = (token: string) =>
  fetch(`${api.url}/media/download?media=none`, { headers: { Authorization: `Bearer ${token}` } });

it('creates an organization with a token the API accepts, lists and revokes tokens', async () => {
  const created = await cli('org:create', '--slug', 'acme', '--name', 'Acme');
  expect(created.code).toBe(0);
  const out = JSON.parse(created.stdout) as {
    organization: { id: number; slug: string; name: string };
    token: string;
    tokenId: string;
  };
  expect(out).toEqual({
    organization: { id: expect.any(Number) as number, slug: 'acme', name: 'Acme' },
    token: expect.stringMatching(/^mst_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/) as string,
    tokenId: expect.stringMatching(/^[0-9a-f]{16}$/) as string,
  });
  // Authenticated (404 for the missing key, not 401).
  expect((await download(out.token)).status).toBe(404);

  const second = await cli('token:create', '--org', 'acme', '--name', 'ci', '--expires-in', '30d');
  expect(second.code).toBe(0);
  const token = JSON.parse(second.stdout) as { token: string; tokenId: string; expiresAt: string };
  const days = (Date.parse(token.expiresAt) - Date.now()) / 86_400_000;
  expect(days).toBeGreaterThan(29.9);
  expect(days).toBeLessThan(30.1);
  expect((await download(token.token)).status).toBe(404);

  const listed = await cli('token:list', '--org', 'acme');
  expect(listed.code).toBe(0);
  expect(listed.stdout).not.toContain(out.token);
  expect(listed.stdout).not.toContain(token.token);
  const list = JSON.parse(listed.stdout) as {
    tokens: { tokenId: string; name: string | null; status: string }[];
  };
  expect(list.tokens.map((t) => [t.tokenId, t.name, t.status])).toEqual([
    [out.tokenId, 'default', 'active'],
    [token.tokenId, 'ci', 'active'],
  ]);

  const revoked = await cli('token:revoke', '--id', token.tokenId);
  expect(revoked.code).toBe(0);
  expect(JSON.parse(revoked.stdout)).toMatchObject({
    token: { tokenId: token.tokenId, status: 'revoked' },
  });
  expect((await download(token.token)).status).toBe(401);
  expect((await download(out.token)).status).toBe(404);
});

it('reports errors as JSON on stderr with a non-zero exit', async () => {
  await cli('org:create', '--slug', 'dupe', '--name', 'Dupe');
  const dupe = await cli('org:create', '--slug', 'dupe', '--name', 'Again');
  expect(dupe.code).not.toBe(0);
  expect(dupe.stdout).toBe('');
  expect(errorOf(dupe.stderr)).toMatchObject({ error: 'CONFLICT' });

  const bad = await cli('org:create', '--slug', 'Not A Slug', '--name', 'x');
  expect(bad.code).not.toBe(0);
  expect(errorOf(bad.stderr)).toMatchObject({ error: 'VALIDATION_FAILED' });

  const missing = await cli('token:create');
  expect(missing.code).toBe(2);
  expect(errorOf(missing.stderr)).toMatchObject({ error: 'USAGE' });

  const unknown = await cli('token:revoke', '--id', 'ffffffffffffffff');
  expect(unknown.code).toBe(1);
  expect(errorOf(unknown.stderr)).toMatchObject({ error: 'NOT_FOUND' });

  const noOrg = await cli('token:list', '--org', 'nobody');
  expect(noOrg.code).toBe(1);
  expect(errorOf(noOrg.stderr)).toMatchObject({ error: 'NOT_FOUND' });
});
