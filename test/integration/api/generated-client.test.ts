/**
 * The generated-client path, as a client team would take it: types generated
 * from api/openapi.yaml by openapi-typescript, a client using openapi-fetch
 * (test/support/generated-client/client.mts) compiled under `tsc --strict`,
 * then run against the real API and worker. The types must let the client
 * read every field it needs without casts (`data` always present, forms typed
 * with their files, folderId absent from an upload's record type).
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import ts from 'typescript';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { FIXTURES } from '../../support/files';
import { startWorker, type TestWorker } from '../../support/worker';

const run = promisify(execFile);
const root = join(__dirname, '..', '..', '..');
const dir = join(root, 'test', 'support', 'generated-client');

let api: TestApi;
let worker: TestWorker;
let org: TestOrg;

beforeAll(async () => {
  api = await startApi('generated-client');
  worker = await startWorker(api.env.env);
  org = await api.createOrg('typed');
});
afterAll(async () => {
  await worker.close();
  await api.close();
});

it('generates types, compiles a client under --strict, and that client works', async () => {
  await run(process.execPath, [join(dir, 'generate.mjs')], { timeout: 60_000 });

  const program = ts.createProgram([join(dir, 'client.mts')], {
    strict: true,
    noEmit: true,
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    lib: ['lib.es2023.d.ts', 'lib.dom.d.ts'],
    types: ['node'],
    typeRoots: [join(root, 'node_modules', '@types')],
    skipLibCheck: true,
  });
  const diagnostics = ts
    .getPreEmitDiagnostics(program)
    .map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
  expect(diagnostics).toEqual([]);

  const { stdout } = await run(process.execPath, ['--import', 'tsx', join(dir, 'client.mts')], {
    cwd: root,
    timeout: 60_000,
    env: {
      ...process.env,
      API_URL: api.url,
      TOKEN: org.token,
      JPEG: join(FIXTURES, 'Canon_40D.jpg'),
    },
  });
  const out = JSON.parse(stdout) as Record<string, Record<string, unknown>>;
  expect(out.upload).toMatchObject({
    status: 201,
    key: expect.stringMatching(/^typed\/generated\/file-[A-Za-z0-9_-]+\.jpg$/) as unknown,
    bucket: api.env.bucket,
    metaData: { ipAddress: '127.0.0.1', userAgent: expect.any(String) as unknown },
    noFolderId: true,
  });
  expect(out.multiple).toMatchObject({ status: 201 });
  expect(out.multiple!.keys).toHaveLength(2);
  expect(out.base64).toEqual({ status: 201, folderId: expect.any(Number) as number });
  expect(Number.isInteger(out.base64!.folderId)).toBe(true);
  expect(out.metadata).toEqual({ format: 'jpeg', width: 100 });
  expect(out.convert).toMatchObject({ mimetype: 'image/png', name: 'file.jpg' });
  expect(out.convert!.folderId).toEqual(expect.any(Number));
  expect(out.download).toMatchObject({ type: 'image/png' });
  expect(out.missing).toEqual({ status: 404, error: 'MEDIA_NOT_FOUND' });
}, 120_000);
