import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CONFIG_VARIABLES, SECRET_VARIABLES, loadConfig } from '../../shared/config';

const root = join(__dirname, '..', '..');
const read = (file: string) => readFileSync(join(root, file), 'utf8');

describe('configuration documentation', () => {
  it('.env.example lists exactly the variables of the schema, and parses', () => {
    const lines = read('.env.example')
      .split('\n')
      .filter((l) => /^[A-Z0-9_]+=/.test(l));
    const names = lines.map((l) => l.split('=')[0]);
    expect([...names].sort()).toEqual([...CONFIG_VARIABLES].sort());
    const env: NodeJS.ProcessEnv = Object.fromEntries(
      lines.map((l): [string, string] => [l.split('=')[0]!, l.slice(l.indexOf('=') + 1)]),
    );
    expect(() => loadConfig(env)).not.toThrow();
  });

  it('the README configuration table lists exactly the variables of the schema', () => {
    const readme = read('README.md');
    const section = readme.slice(readme.indexOf('## Configuration'));
    const table = section.slice(0, section.indexOf('\n## ', 5));
    const names = [...table.matchAll(/^\|\s*`([A-Z0-9_]+)`\s*\|/gm)].map((m) => m[1]);
    expect([...names].sort()).toEqual([...CONFIG_VARIABLES].sort());
  });

  it('says of every secret, and only of secrets, that it may come from <NAME>_FILE', () => {
    const readme = read('README.md');
    const section = readme.slice(readme.indexOf('## Configuration'));
    const table = section.slice(0, section.indexOf('\n## ', 5));
    const rows = new Map(
      [...table.matchAll(/^\|\s*`([A-Z0-9_]+)`\s*\|(.*)$/gm)].map((m) => [m[1]!, m[2]!]),
    );
    for (const name of CONFIG_VARIABLES) {
      const secret = (SECRET_VARIABLES as readonly string[]).includes(name);
      expect({ name, mentionsFile: rows.get(name)!.includes(`\`${name}_FILE\``) }).toEqual({
        name,
        mentionsFile: secret,
      });
    }
    const example = read('.env.example');
    for (const name of SECRET_VARIABLES)
      expect(example).toMatch(new RegExp(`^# ${name}_FILE=`, 'm'));
  });
});
