// Lints api/openapi.yaml with Redocly's maintained linter (its `recommended`
// ruleset, every rule at its default severity) and prints the problems as JSON:
// `[{ ruleId, severity, message, location }]`. Run by test/unit/openapi-lint.test.ts
// in its own Node process: @redocly/openapi-core is ESM-only, which jest's module
// loader does not load.
import { fileURLToPath } from 'node:url';
import { createConfig, lint } from '@redocly/openapi-core';

const spec = fileURLToPath(new URL('../../api/openapi.yaml', import.meta.url));
const config = await createConfig({ extends: ['recommended'] });
const problems = await lint({ ref: spec, config });
process.stdout.write(
  JSON.stringify(
    problems.map((p) => ({
      ruleId: p.ruleId,
      severity: p.severity,
      message: p.message,
      location: p.location.map((l) => l.pointer).join(', '),
    })),
  ),
);
