/**
 * The API's boundary as docs/architecture.md ("The HTTP boundary") draws it:
 * api/services/ holds services only, and nothing travels beside a request but
 * its context (api/http/request-context.ts): no field declared on Express's or
 * Node's request types, nothing through `res.locals`. (ESLint refuses
 * express, busboy, bullmq and the transport's folders in api/services and
 * api/domain: eslint.config.mjs.)
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const root = join(__dirname, '..', '..');
const api = join(root, 'api');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

/** A file's code without its comments (enough for the patterns below). */
const code = (path: string) =>
  readFileSync(path, 'utf8')
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/^\s*\/\/.*$/gm, '');

describe('the API boundary', () => {
  it('api/services holds services only (*.service.ts)', () => {
    const others = readdirSync(join(api, 'services')).filter((f) => !f.endsWith('.service.ts'));
    expect(others).toEqual([]);
  });

  it('declares nothing on the request types and passes nothing through res.locals', () => {
    const found = sources(api).flatMap((path) => {
      const text = code(path);
      return [
        /declare module ['"](express|express-serve-static-core|node:http|http)['"]/,
        /\bres\.locals\b/,
      ]
        .filter((pattern) => pattern.test(text))
        .map((pattern) => `${relative(root, path)}: ${pattern.source}`);
    });
    expect(found).toEqual([]);
  });
});
