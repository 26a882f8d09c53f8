/**
 * The operator CLI, run as operators run it (`npm run --silent cli -- …`):
 * JSON on stdout, errors on stderr with a non-zero exit, tokens (with scopes)
 * that the API accepts until they are revoked, quotas, and an organization's
 * offboarding that leaves nothing of it behind. The process itself (npm, tsx,
 * the exit code) is checked by the commands run through `spawned()`; the
 * others run one after another in one CLI process (`cliSession()`), through
 * the same `runCli()`, answering the same exit code, stdout and stderr.
 */
import { cliSession, runCli, type CliSession } from '../support/cli';
import { startApi, uploadThrough, type TestApi } from '../support/api';
import { fixture, form } from '../support/files';
import { startWorker } from '../support/worker';

let api: TestApi;
let session: CliSession;
beforeAll(async () => {
  api = await startApi('cli');
  session = await cliSession(api.env.env);
});
afterAll(async () => {
  await session?.close();
  await api.close();
});

/** A command in its own process, as an operator runs it. */
const spawned = (...args: string[]) => runCli(api.env.env, ...args);
/** A command in the file's one CLI process. */
const cli = (...args: string[]) => session.run(...args);

/** The CLI's JSON error line (npm itself may warn on stderr too). */
const errorOf = (stderr: string): unknown => {
  const line = stderr.split('\n').find((l) => l.startsWith('{'));
  if (!line) throw new Error(`no JSON error on stderr: ${stderr}`);
  return JSON.parse(line);
};

const download = (token: string) =>
  fetch(`${api.url}/media/download?media=none`, { headers: { Authorization: `Bearer ${token}` } });

it('creates an organization with a token the API accepts, lists and revokes tokens', async () => {
  const created = await spawned('org:create', '--slug', 'acme', '--name', 'Acme');
  expect(created.code).toBe(0);
  const out = JSON.parse(created.stdout) as {
    organization: { id: number; slug: string; name: string };
    token: string;
    tokenId: string;
  };
  expect(out).toEqual({
    organization: {
      id: expect.any(Number) as number,
      slug: 'acme',
      name: 'Acme',
      quotaBytes: null,
      rootFolderId: expect.any(Number) as number,
    },
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
  const dupe = await spawned('org:create', '--slug', 'dupe', '--name', 'Again');
  expect(dupe.code).not.toBe(0);
  expect(dupe.stdout).toBe('');
  expect(errorOf(dupe.stderr)).toMatchObject({ error: 'CONFLICT' });

  const bad = await cli('org:create', '--slug', 'Not A Slug', '--name', 'x');
  expect(bad.code).not.toBe(0);
  expect(errorOf(bad.stderr)).toMatchObject({ error: 'VALIDATION_FAILED' });

  const missing = await spawned('token:create');
  expect(missing.code).toBe(2);
  expect(errorOf(missing.stderr)).toMatchObject({ error: 'USAGE' });

  const unknown = await cli('token:revoke', '--id', 'ffffffffffffffff');
  expect(unknown.code).toBe(1);
  expect(errorOf(unknown.stderr)).toMatchObject({ error: 'NOT_FOUND' });

  const noOrg = await cli('token:list', '--org', 'nobody');
  expect(noOrg.code).toBe(1);
  expect(errorOf(noOrg.stderr)).toMatchObject({ error: 'NOT_FOUND' });
  // Two CLI processes: on a loaded machine each may take several seconds to start.
}, 120_000);

it('makes tokens with scopes: a read-only token reads and cannot write (403)', async () => {
  await cli('org:create', '--slug', 'scoped', '--name', 'Scoped');
  const made = await cli('token:create', '--org', 'scoped', '--scopes', 'read');
  expect(made.code).toBe(0);
  const token = JSON.parse(made.stdout) as { token: string; scopes: string[] };
  expect(token.scopes).toEqual(['read']);
  expect((await download(token.token)).status).toBe(404);
  const write = await fetch(`${api.url}/media/folders`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token.token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ name: 'nope' }),
  });
  expect(write.status).toBe(403);
  const bad = await cli('token:create', '--org', 'scoped', '--scopes', 'read,admin');
  expect([bad.code, (errorOf(bad.stderr) as { error: string }).error]).toEqual([2, 'USAGE']);
});

it('lists organizations with their usage, sets and removes a quota', async () => {
  await cli('org:create', '--slug', 'quota', '--name', 'Quota');
  const set = await cli('org:update', '--org', 'quota', '--quota', '10GB');
  expect(set.code).toBe(0);
  expect(JSON.parse(set.stdout)).toMatchObject({
    organization: { slug: 'quota', quotaBytes: 10 * 1024 ** 3 },
  });
  const listed = JSON.parse((await cli('org:list')).stdout) as {
    organizations: { slug: string; quotaBytes: number | null; usage: unknown }[];
  };
  expect(listed.organizations.find((o) => o.slug === 'quota')).toEqual(
    expect.objectContaining({ quotaBytes: 10 * 1024 ** 3, usage: { bytes: 0, files: 0 } }),
  );
  const none = await cli('org:update', '--org', 'quota', '--quota', 'none');
  expect(JSON.parse(none.stdout)).toMatchObject({ organization: { quotaBytes: null } });
  const bad = await cli('org:update', '--org', 'quota', '--quota', 'lots');
  expect(bad.code).toBe(2);
});

it('sets and removes an organization’s scan policy', async () => {
  await cli('org:create', '--slug', 'policy', '--name', 'Policy');
  const set = await cli('org:update', '--org', 'policy', '--scan-policy', 'not-infected');
  expect(set.code).toBe(0);
  expect(JSON.parse(set.stdout)).toMatchObject({
    organization: { slug: 'policy', scanPolicy: 'not-infected' },
  });
  const reset = await cli('org:update', '--org', 'policy', '--scan-policy', 'default');
  expect(JSON.parse(reset.stdout)).not.toHaveProperty('organization.scanPolicy');
  const bad = await cli('org:update', '--org', 'policy', '--scan-policy', 'anything');
  expect([bad.code, (errorOf(bad.stderr) as { error: string }).error]).toEqual([2, 'USAGE']);
});

it('sets and removes an organization’s trash retention', async () => {
  await cli('org:create', '--slug', 'trashy', '--name', 'Trashy');
  const set = await cli('org:update', '--org', 'trashy', '--trash-retention', '7d');
  expect(set.code).toBe(0);
  expect(JSON.parse(set.stdout)).toMatchObject({
    organization: { slug: 'trashy', trashRetentionS: 7 * 24 * 3600 },
  });
  const none = await cli('org:update', '--org', 'trashy', '--trash-retention', '0');
  expect(JSON.parse(none.stdout)).toMatchObject({ organization: { trashRetentionS: 0 } });
  const reset = await cli('org:update', '--org', 'trashy', '--trash-retention', 'default');
  expect(JSON.parse(reset.stdout)).not.toHaveProperty('organization.trashRetentionS');
  const bad = await cli('org:update', '--org', 'trashy', '--trash-retention', 'forever');
  expect([bad.code, (errorOf(bad.stderr) as { error: string }).error]).toEqual([2, 'USAGE']);
});

it('deletes an organization and everything it had, and nothing of another', async () => {
  const created = JSON.parse(
    (await cli('org:create', '--slug', 'leaving', '--name', 'Leaving')).stdout,
  ) as {
    organization: { id: number };
    token: string;
  };
  const other = await api.createOrg('staying');
  const auth = { Authorization: `Bearer ${created.token}` };
  await uploadThrough(api.url, auth, 'Canon_40D.jpg', 'a.jpg', { folder: 'Album' });
  await uploadThrough(api.url, auth, 'Canon_40D.jpg', 'b.jpg');
  const kept = await other.upload('Canon_40D.jpg', 'kept.jpg');
  // A merged PDF (at the bucket's root) and a job still queued.
  const worker = await startWorker(api.env.env);
  try {
    const merged = await fetch(`${api.url}/media/merge-pdfs`, {
      method: 'POST',
      headers: auth,
      body: form([['files', fixture('minimal-document.pdf'), 'x.pdf']]),
    });
    expect(merged.status).toBe(201);
  } finally {
    await worker.close();
  }
  const queued = await fetch(`${api.url}/media/merge-pdfs`, {
    method: 'POST',
    headers: { ...auth, Prefer: 'respond-async' },
    body: form([['files', fixture('minimal-document.pdf'), 'y.pdf']]),
  });
  expect(queued.status).toBe(202);

  const wrong = await cli('org:delete', '--org', 'leaving', '--confirm', 'staying');
  expect(wrong.code).toBe(2);
  const out = await cli('org:delete', '--org', 'leaving', '--confirm', 'leaving');
  expect(out.code).toBe(0);
  const report = JSON.parse(out.stdout) as Record<string, unknown>;
  // The queued merge, and the event deliveries of its files' uploads and folder that the
  // worker (closed after the first merge) had queued but not run: how many of those depends
  // on timing. That none is left is checked at the end.
  expect(report.jobsRemoved).toBeGreaterThanOrEqual(1);
  expect(report).toMatchObject({
    tokensRevoked: 1,
    files: { count: 3 },
    folders: 1,
    tokens: 1,
  });
  const id = created.organization.id;
  const { models } = api.ctx;
  expect(await models.Organization.countDocuments({ id })).toBe(0);
  expect(await models.Media.countDocuments({ organizationId: id })).toBe(0);
  expect(await models.Folder.countDocuments({ organizationId: id })).toBe(0);
  expect(await models.ApiToken.countDocuments({ organizationId: id })).toBe(0);
  expect(await models.KeyClaim.countDocuments({ organizationId: id })).toBe(0);
  expect(await models.Usage.countDocuments({ _id: id })).toBe(0);
  expect(await api.objectKeys('leaving/')).toEqual([]);
  expect((await api.objectKeys('merged_')).length).toBe(0);
  expect((await download(created.token)).status).toBe(401);
  // The other organization is untouched.
  expect(await api.objectKeys('staying/')).toEqual([kept]);
  // No job of it is left waiting (the other organization's may be: its upload's event delivery).
  expect(await api.ctx.queue.removeUnstartedOf(id)).toEqual({ removed: 0, active: 0 });
});
