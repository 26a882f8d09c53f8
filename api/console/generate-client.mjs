// Generates src/generated/openapi.d.ts (git-ignored) from api/openapi.yaml with
// openapi-typescript, before the console is type-checked and built: the
// console's client (openapi-fetch) is typed by the same description clients
// use, so a route or field that drifts breaks `npm run build`.
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import openapiTS, { astToString } from 'openapi-typescript';
import ts from 'typescript';

const spec = new URL('../openapi.yaml', import.meta.url);
const out = new URL('./src/generated/', import.meta.url);
const BLOB = ts.factory.createTypeReferenceNode(ts.factory.createIdentifier('Blob'));
const ast = await openapiTS(spec, {
  transform(schema) {
    if (schema.format === 'binary') return BLOB;
    return undefined;
  },
});
mkdirSync(fileURLToPath(out), { recursive: true });
const file = fileURLToPath(new URL('./openapi.d.ts', out));
const text = `// Generated from api/openapi.yaml by api/console/generate-client.mjs: do not edit.\n${astToString(ast)}`;
let current = null;
try {
  current = readFileSync(file, 'utf8');
} catch {
  // not generated yet
}
// Written whole or not at all (a temporary file renamed over it): lint, typecheck
// and the build each generate it first, and CI runs them side by side, so a
// reader must never see a half-written file. Unchanged, it is left alone.
if (current !== text) {
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, text);
  renameSync(temporary, file);
}
