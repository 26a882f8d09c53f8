/**
 * The web console at `/console`: the static files `npm run build` writes to
 * dist/console (api/console, a Vite + Preact app), served as they are. The
 * console talks to the public API only, with the token a person pastes into
 * it, so serving it grants nothing; `CONSOLE_ENABLED=false` turns it off.
 *
 * It runs on the API's own origin, so it is locked down like /docs, tighter:
 * scripts and styles only from its own files (no inline script or style, no
 * eval), images from the API (signed render URLs) and blob:, requests to
 * the API only, no plugins, no forms posted anywhere, no framing
 * (`frame-ancestors 'none'` and `X-Frame-Options: DENY`). The hashed files
 * under assets/ are cached for a year; index.html is revalidated each time.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import express, { Router } from 'express';
import { pageProtection } from '../middleware/page-protection';

/** The URL path the console is served under (Vite's `base`, api/console/vite.config.ts). */
export const CONSOLE_PATH = '/console';

/**
 * Where the built console is: beside dist/api when running the build
 * (dist/console), or under dist/ when the API runs from source (tests, tsx).
 */
export function consoleDir(): string | undefined {
  return [join(__dirname, '..', '..', 'console'), join(__dirname, '..', '..', 'dist', 'console')]
    .map((dir) => join(dir, 'index.html'))
    .find((file) => existsSync(file))
    ?.replace(/index\.html$/, '');
}

/** The console's Content-Security-Policy; `origins` adds where signed URLs point when not the API. */
export function consoleCsp(origins: readonly string[] = []): string[] {
  const extra = origins.length > 0 ? ` ${origins.join(' ')}` : '';
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    `img-src 'self' blob: data:${extra}`,
    `connect-src 'self'${extra}`,
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ];
}

/** The console's routes, relative to CONSOLE_PATH, where app.ts mounts them. */
export function consoleRoutes(deps: { dir: string; publicBaseUrl?: string | undefined }): Router {
  const router = Router();
  const origins = deps.publicBaseUrl ? [new URL(deps.publicBaseUrl).origin] : [];
  router.use(pageProtection(consoleCsp(origins)), (_req, res, next) => {
    res.setHeader('X-Content-Type-Options', 'nosniff');
    res.setHeader('Referrer-Policy', 'no-referrer');
    res.setHeader('Cross-Origin-Opener-Policy', 'same-origin');
    next();
  });
  router.use(
    express.static(deps.dir, {
      index: 'index.html',
      fallthrough: true,
      setHeaders(res, file) {
        res.setHeader(
          'Cache-Control',
          /[\\/]assets[\\/]/.test(file) ? 'public, max-age=31536000, immutable' : 'no-cache',
        );
      },
    }),
  );
  return router;
}
