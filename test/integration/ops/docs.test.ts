/**
 * GET /docs: the interactive page (Swagger UI, its assets served by the API
 * itself) and the OpenAPI description it shows, byte for byte the one in the
 * repository. Public: no token needed.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parse } from 'yaml';
import { startApi, type TestApi } from '../../support/api';

let api: TestApi;
beforeAll(async () => {
  api = await startApi('docs');
});
afterAll(() => api.close());

const specFile = join(__dirname, '..', '..', '..', 'api', 'openapi.yaml');

it('serves an interactive page whose script and styles come from the API itself', async () => {
  const page = await fetch(`${api.url}/docs/`);
  expect(page.status).toBe(200);
  expect(page.headers.get('content-type')).toMatch(/text\/html/);
  const html = await page.text();
  expect(html).toContain('<div id="swagger-ui">');
  const assets = [...html.matchAll(/(?:src|href)="\.\/([^"]+\.(?:js|css))"/g)].map((m) => m[1]!);
  expect(assets).toEqual(expect.arrayContaining(['swagger-ui-bundle.js', 'swagger-ui.css']));
  for (const asset of assets) {
    const res = await fetch(`${api.url}/docs/${asset}`);
    expect([asset, res.status]).toEqual([asset, 200]);
    expect((await res.arrayBuffer()).byteLength).toBeGreaterThan(0);
  }
  // The page's init script carries the description itself.
  const init = await (await fetch(`${api.url}/docs/swagger-ui-init.js`)).text();
  expect(init).toContain('"/media/upload"');
  // Without the trailing slash the page is reachable too.
  const bare = await fetch(`${api.url}/docs`);
  expect(bare.status).toBe(200);
  expect(await bare.text()).toContain('<div id="swagger-ui">');
});

it('serves the OpenAPI description as YAML (the repository file) and as JSON', async () => {
  const yaml = await fetch(`${api.url}/docs/openapi.yaml`);
  expect(yaml.status).toBe(200);
  expect(yaml.headers.get('content-type')).toMatch(/application\/yaml/);
  const text = await yaml.text();
  expect(text).toBe(await readFile(specFile, 'utf8'));

  const json = await fetch(`${api.url}/docs/openapi.json`);
  expect(json.status).toBe(200);
  expect(await json.json()).toEqual(parse(text));
});
