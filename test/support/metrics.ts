/**
 * What a process's /metrics says, for tests that count what the service did
 * (as an operator would see it).
 */

/** Calls made so far to a dependency (`media_dependency_duration_seconds_count`). */
export async function dependencyCalls(
  baseUrl: string,
  dependency: 'storage' | 'mongodb' | 'redis',
  operation: string,
): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const line = `media_dependency_duration_seconds_count{dependency="${dependency}",operation="${operation}"} `;
  const found = text.split('\n').find((l) => l.startsWith(line));
  return found ? Number(found.slice(line.length)) : 0;
}

/** A gauge without labels, as /metrics reads it (undefined when absent). */
export async function gauge(baseUrl: string, name: string): Promise<number | undefined> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const found = text.split('\n').find((l) => l.startsWith(`${name} `));
  return found ? Number(found.slice(name.length + 1)) : undefined;
}
