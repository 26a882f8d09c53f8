/**
 * GET /docs: the interactive page (Swagger UI, its assets served by the API
 * itself) and the OpenAPI description it shows, byte for byte the one in the
 * repository. Public: no token needed. Kept tight, as it runs on the API's
 * origin: a Content Security Policy, no framing by other sites, and a token
 * given to "Authorize" is not kept in localStorage (and one an earlier
 * version kept there is removed). The page under its policy in a real
 * browser: test/e2e/docs-page.test.ts.
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
  // The page's init script points at the description as JSON, beside the page (fetched by
  // the page, not carried inline: it is parsed on its first request, not at start).
  const init = await (await fetch(`${api.url}/docs/swagger-ui-init.js`)).text();
  expect(init).toContain('"swaggerUrl": "./openapi.json"');
  const described = await fetch(new URL('./openapi.json', `${api.url}/docs/`));
  expect(described.status).toBe(200);
  expect(await described.text()).toContain('"/media/upload"');
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

it('sends a Content Security Policy and forbids framing, on the page, its assets and the description', async () => {
  for (const path of ['/docs/', '/docs/swagger-ui-bundle.js', '/docs/openapi.json']) {
    const res = await fetch(`${api.url}${path}`);
    await res.arrayBuffer();
    expect([path, res.status]).toEqual([path, 200]);
    expect(res.headers.get('x-frame-options')).toBe('DENY');
    const policy = Object.fromEntries(
      res.headers
        .get('content-security-policy')!
        .split(';')
        .map((d): [string, string] => {
          const [name = '', ...values] = d.trim().split(/\s+/);
          return [name, values.join(' ')];
        }),
    );
    expect(policy).toMatchObject({
      'default-src': "'none'",
      'script-src': "'self'", // no inline script, no eval, nothing from elsewhere
      'connect-src': "'self'",
      'frame-ancestors': "'none'",
    });
  }
});

it('does not keep the token given to "Authorize", and forgets one an earlier version kept', async () => {
  const init = await (await fetch(`${api.url}/docs/swagger-ui-init.js`)).text();
  expect(init).toMatch(/"persistAuthorization":\s*false/);
  const html = await (await fetch(`${api.url}/docs/`)).text();
  expect(html).toContain(`src='./forget-token.js'`);
  const forget = await fetch(`${api.url}/docs/forget-token.js`);
  expect(forget.headers.get('content-type')).toMatch(/javascript/);
  expect(await forget.text()).toContain("localStorage.removeItem('authorized')");
});
