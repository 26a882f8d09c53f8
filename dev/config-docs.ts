/**
 * `npm run config:docs`: rewrites `.env.example` and docs/configuration.md
 * from the configuration table (shared/config/variables.ts). Run it after
 * adding or changing a variable; test/unit/config-docs.test.ts fails until the
 * committed files match the table.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  CONFIGURATION_DOC,
  ENV_EXAMPLE,
  renderConfigurationDoc,
  renderEnvExample,
} from './config-reference';

const root = join(__dirname, '..');
for (const [file, text] of [
  [ENV_EXAMPLE, renderEnvExample()],
  [CONFIGURATION_DOC, renderConfigurationDoc()],
] as const) {
  writeFileSync(join(root, file), text);
  process.stdout.write(`wrote ${file}\n`);
}
