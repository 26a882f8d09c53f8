/**
 * The OpenAPI description, served as it is (`/docs/openapi.yaml`, and as JSON
 * at `/docs/openapi.json`) and as an interactive page at `/docs` (Swagger UI,
 * served from the swagger-ui-dist package: no CDN, works offline; "Try it out"
 * takes a bearer token through its Authorize button). Public, like the
 * description in the repository.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Router } from 'express';
import swaggerUi from 'swagger-ui-express';
import { parse } from 'yaml';

/** api/openapi.yaml beside the routes; the build copies it to dist/api/. */
export const OPENAPI_FILE = join(__dirname, '..', 'openapi.yaml');

export function docsRoutes(): Router {
  const text = readFileSync(OPENAPI_FILE, 'utf8');
  const spec = parse(text) as Record<string, unknown>;
  const router = Router();
  router.get('/docs/openapi.yaml', (_req, res) => {
    res.type('application/yaml').send(text);
  });
  router.get('/docs/openapi.json', (_req, res) => {
    res.json(spec);
  });
  router.use(
    '/docs',
    swaggerUi.serve,
    swaggerUi.setup(spec, {
      customSiteTitle: 'Media storage service API',
      swaggerOptions: { persistAuthorization: true, tryItOutEnabled: false },
    }),
  );
  return router;
}
