/**
 * The files derived from the configuration table (shared/config/variables.ts):
 * `.env.example` and docs/configuration.md are what `npm run config:docs`
 * writes today, list exactly the schema's variables, and say of every secret,
 * and only of secrets, that it may come from `<NAME>_FILE`.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  CONFIGURATION_DOC,
  ENV_EXAMPLE,
  renderConfigurationDoc,
  renderEnvExample,
} from '../../dev/config-reference';
import { CONFIG_VARIABLES, SECRET_VARIABLES, loadConfig } from '../../shared/config';
import { SECTIONS, VARIABLES } from '../../shared/config/variables';

const root = join(__dirname, '..', '..');
const read = (file: string) => readFileSync(join(root, file), 'utf8');
const sorted = (names: readonly string[]) => [...names].sort();

describe('configuration documentation', () => {
  it.each([
    [ENV_EXAMPLE, renderEnvExample],
    [CONFIGURATION_DOC, renderConfigurationDoc],
  ])('%s is what npm run config:docs writes (run it after changing a variable)', (file, render) => {
    // Compared line by line so a failure shows the first stale line, not two whole files.
    expect(read(file).split('\n')).toEqual(render().split('\n'));
  });

  it('.env.example lists exactly the variables of the schema, and parses', () => {
    const lines = read(ENV_EXAMPLE)
      .split('\n')
      .filter((l) => /^[A-Z0-9_]+=/.test(l));
    const names = lines.map((l) => l.split('=')[0]!);
    expect(sorted(names)).toEqual(sorted(CONFIG_VARIABLES));
    const env: NodeJS.ProcessEnv = Object.fromEntries(
      lines.map((l): [string, string] => [l.split('=')[0]!, l.slice(l.indexOf('=') + 1)]),
    );
    expect(() => loadConfig(env)).not.toThrow();
  });

  it('docs/configuration.md has one entry per variable, each in its section', () => {
    const doc = read(CONFIGURATION_DOC);
    const entries = [...doc.matchAll(/^### `([A-Z0-9_]+)`$/gm)].map((m) => m[1]!);
    expect(sorted(entries)).toEqual(sorted(CONFIG_VARIABLES));
    const sectionOf = (name: string) => {
      const before = doc.slice(0, doc.indexOf(`### \`${name}\``));
      return before.slice(before.lastIndexOf('\n## ') + 4).split('\n')[0];
    };
    for (const name of CONFIG_VARIABLES) {
      expect({ name, section: sectionOf(name) }).toEqual({
        name,
        section: SECTIONS[VARIABLES[name].section].title,
      });
    }
  });

  it('says of every secret, and only of secrets, that it may come from <NAME>_FILE', () => {
    const doc = read(CONFIGURATION_DOC);
    const example = read(ENV_EXAMPLE);
    for (const name of CONFIG_VARIABLES) {
      const start = doc.indexOf(`### \`${name}\``);
      const next = doc.indexOf('\n#', start + 1);
      const docEntry = doc.slice(start, next === -1 ? undefined : next);
      const secret = (SECRET_VARIABLES as readonly string[]).includes(name);
      expect({
        name,
        docMentionsFile: docEntry.includes(`\`${name}_FILE\``),
        exampleHasFile: new RegExp(`^# ${name}_FILE=`, 'm').test(example),
      }).toEqual({ name, docMentionsFile: secret, exampleHasFile: secret });
    }
  });

  it('the README points to the reference instead of keeping a table of its own', () => {
    const readme = read('README.md');
    expect(readme).toContain('(docs/configuration.md)');
    const rows = [...readme.matchAll(/^\|\s*`([A-Z0-9_]+)`\s*\|/gm)].map((m) => m[1]!);
    expect(rows.filter((name) => (CONFIG_VARIABLES as readonly string[]).includes(name))).toEqual(
      [],
    );
  });
});
