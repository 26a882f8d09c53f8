// Generates openapi.d.ts (beside this file) from api/openapi.yaml with
// openapi-typescript, as a client team would, with file fields (`format:
// binary`) typed as Blob (openapi-typescript's documented transform).
// Used by test/integration/api/generated-client.test.ts.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import openapiTS, { astToString } from 'openapi-typescript';
import ts from 'typescript';

const spec = new URL('../../../api/openapi.yaml', import.meta.url);
const BLOB = ts.factory.createTypeReferenceNode(ts.factory.createIdentifier('Blob'));
const ast = await openapiTS(spec, {
  transform(schema) {
    if (schema.format === 'binary') return BLOB;
    return undefined;
  },
});
writeFileSync(fileURLToPath(new URL('./openapi.d.ts', import.meta.url)), astToString(ast));
