/**
 * Whether a Docker engine answers. Asked once per run; `TESTCONTAINERS=off`
 * skips the question (and the containers) altogether.
 */
let answer: Promise<boolean> | undefined;

export function dockerAvailable(): Promise<boolean> {
  answer ??= probe();
  return answer;
}

async function probe(): Promise<boolean> {
  if (process.env.TESTCONTAINERS === 'off') return false;
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    const timeout = new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error('timed out')), 10_000).unref(),
    );
    await Promise.race([getContainerRuntimeClient(), timeout]);
    return true;
  } catch {
    return false;
  }
}
