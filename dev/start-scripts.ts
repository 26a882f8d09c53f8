/**
 * The API's and the worker's start commands as package.json's `start:api` and
 * `start:worker` give them (what production, Dockerfile.api and
 * Dockerfile.worker run): Node's flags and the environment set before
 * `node`. The development launcher and the benchmarks start their processes
 * from these, so none of them keeps a copy that could drift.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export type StartScript = 'start:api' | 'start:worker';

function startScript(script: StartScript): string[] {
  const pkg = JSON.parse(readFileSync(join(__dirname, '..', 'package.json'), 'utf8')) as {
    scripts: Record<string, string>;
  };
  return pkg.scripts[script]!.split(/\s+/);
}

/** Node's flags in an npm start script of package.json (what production starts the process with). */
export function startFlags(script: StartScript): string[] {
  return startScript(script).filter((arg) => arg.startsWith('--'));
}

/** The environment an npm start script sets before `node` (glibc's malloc tuning). */
export function startEnv(script: StartScript): Record<string, string> {
  const words = startScript(script);
  const assignments = words.slice(0, words.indexOf('node'));
  return Object.fromEntries(assignments.map((a) => a.split('=', 2) as [string, string]));
}
