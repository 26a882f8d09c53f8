/**
 * Secrets from files: each variable the table marks `secret` may be given
 * instead as `<NAME>_FILE`, the path of a file holding the value (Docker and
 * Kubernetes secrets mounted as files), read before validation with its
 * trailing newline trimmed. Both set is refused, and so is a file that cannot
 * be read.
 */
import { readFileSync } from 'node:fs';
import { VARIABLES, type VariableName } from './variables';

/** Variables that hold credentials, in the table's order. */
export const SECRET_VARIABLES: readonly VariableName[] = (
  Object.keys(VARIABLES) as VariableName[]
).filter((name) => 'secret' in VARIABLES[name]);

/** Why a file cannot be read (its error code), or undefined when it can. */
export function unreadableFile(path: string): string | undefined {
  try {
    readFileSync(path);
    return undefined;
  } catch (err) {
    return `cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? String(err)})`;
  }
}

/**
 * The environment with every `<NAME>_FILE` of a secret variable read into
 * `<NAME>`, the problems found doing so, and which names came from a file.
 */
export function resolveSecretFiles(env: NodeJS.ProcessEnv): {
  env: NodeJS.ProcessEnv;
  problems: string[];
  fromFile: Set<string>;
} {
  const resolved: NodeJS.ProcessEnv = { ...env };
  const problems: string[] = [];
  const fromFile = new Set<string>();
  for (const name of SECRET_VARIABLES) {
    const fileVar = `${name}_FILE`;
    const path = env[fileVar]?.trim();
    if (!path) continue;
    if (env[name]?.trim()) {
      problems.push(`${name}: both ${name} and ${fileVar} are set; set one of them`);
      continue;
    }
    try {
      // One trailing newline (or several: `echo`, editors) is not part of a secret.
      resolved[name] = readFileSync(path, 'utf8').replace(/[\r\n]+$/, '');
      fromFile.add(name);
    } catch (err) {
      problems.push(
        `${fileVar}: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? String(err)})`,
      );
    }
  }
  return { env: resolved, problems, fromFile };
}
