/**
 * The OpenAPI description, served as it is (`/docs/openapi.yaml`, and as JSON
 * at `/docs/openapi.json`) and as an interactive page at `/docs` (Swagger UI,
 * served from the swagger-ui-dist package: no CDN, works offline; "Try it out"
 * takes a bearer token through its Authorize button). Public, like the
 * description in the repository.
 *
 * The page runs on the API's own origin, so it is kept tight: a Content
 * Security Policy (`DOCS_CSP`: scripts only from the API itself, no inline
 * script, no eval, requests only to the API, no framing by other sites, with
 * X-Frame-Options too), and a token given to "Authorize" lives only as long
 * as the page (`persistAuthorization: false`; `forget-token.js` removes one
 * an earlier version kept in localStorage).
 *
 * The description is read and parsed on its first request, not when the app
 * is made: parsing its YAML takes a few hundred milliseconds, which every
 * process start (and every test's API) would otherwise pay. The page fetches
 * it as JSON (`./openapi.json`) rather than carrying it inline.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Router } from 'express';
import swaggerUi from 'swagger-ui-express';
import { parse } from 'yaml';
import { pageProtection } from '../middleware/page-protection';

/** The URL path the API's documentation is served under (app.ts mounts docsRoutes() there). */
export const DOCS_PATH = '/docs';

/** api/openapi.yaml beside the routes; the build copies it to dist/api/. */
export const OPENAPI_FILE = join(__dirname, '..', 'openapi.yaml');

/**
 * What the Swagger UI page may load: its scripts and styles from the API (no
 * inline script, no eval), inline styles (the page's `<style>` blocks and
 * the style attributes Swagger UI sets), images from the API, data: (its
 * icons) and blob: ("Try it out" shows an image answer through one),
 * requests to the API only (the description's server is `/`).
 */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data: blob:",
  "font-src 'self' data:",
  "connect-src 'self'",
  "form-action 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
];

/** Removes the token an earlier Swagger UI setup (persistAuthorization: true) left in localStorage. */
const FORGET_TOKEN_JS = `// Swagger UI no longer keeps the token given to "Authorize"; forget one kept earlier.
try { window.localStorage.removeItem('authorized'); } catch (e) { /* storage unavailable */ }
`;

/** The documentation's routes, relative to DOCS_PATH, where app.ts mounts them. */
export function docsRoutes(): Router {
  let text: string | undefined;
  let json: string | undefined;
  const yaml = () => (text ??= readFileSync(OPENAPI_FILE, 'utf8'));
  const router = Router();
  router.use(pageProtection(DOCS_CSP));
  router.get('/forget-token.js', (_req, res) => {
    res.type('application/javascript').send(FORGET_TOKEN_JS);
  });
  router.get('/openapi.yaml', (_req, res) => {
    res.type('application/yaml').send(yaml());
  });
  router.get('/openapi.json', (_req, res) => {
    json ??= JSON.stringify(parse(yaml()));
    res.type('application/json').send(json);
  });
  router.use(
    swaggerUi.serve,
    swaggerUi.setup(undefined, {
      customSiteTitle: 'Media storage service API',
      customJs: './forget-token.js',
      // Relative to the page (/docs/), as the script above.
      swaggerUrl: './openapi.json',
      swaggerOptions: { persistAuthorization: false, tryItOutEnabled: false, validatorUrl: null },
    }),
  );
  return router;
}
