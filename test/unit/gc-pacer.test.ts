/**
 * The byte-paced young-generation collections (shared/gc-pacer.ts): one per
 * STEP bytes streamed, none without a collector, and on in a process started
 * with the API's production flags (package.json's start:api, which
 * Dockerfile.api's CMD repeats: test/deploy/deployment-files.test.ts).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pacing, setCollector, STEP, streamed } from '../../shared/gc-pacer';

const root = join(__dirname, '..', '..');

describe('gc pacer', () => {
  let before: ReturnType<typeof setCollector>;
  beforeEach(() => {
    before = setCollector(undefined);
  });
  afterEach(() => {
    setCollector(before);
  });

  it('collects once per STEP bytes, counting across calls', () => {
    let calls = 0;
    setCollector(() => calls++);
    const chunk = 64 * 1024;
    for (let sent = chunk; sent < STEP; sent += chunk) streamed(chunk);
    expect(calls).toBe(0);
    streamed(chunk); // reaches STEP
    expect(calls).toBe(1);
    for (let i = 0; i < (3 * STEP) / chunk; i++) streamed(chunk);
    expect(calls).toBe(4);
  });

  it('does nothing without a collector', () => {
    expect(pacing()).toBe(false);
    expect(() => streamed(10 * STEP)).not.toThrow();
  });

  it("is on under the API's production flags, and V8 takes the minor collection it asks for", () => {
    const script = (
      JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
        scripts: Record<string, string>;
      }
    ).scripts['start:api']!;
    const flags = script.split(/\s+/).filter((word) => word.startsWith('--'));
    expect(flags).toContain('--expose-gc');
    // --trace-gc prints each collection; the ones `gc()` asks for carry the reason "testing".
    const out = execFileSync(
      process.execPath,
      [
        ...flags,
        '--trace-gc',
        '--import',
        'tsx',
        '-e',
        `import('./shared/gc-pacer.ts').then((m) => {
           const { STEP, pacing, streamed } = m.default ?? m;
           for (let i = 0; i < 3; i++) streamed(STEP);
           console.log('pacing=' + pacing());
         })`,
      ],
      { cwd: root, encoding: 'utf8' },
    );
    expect(out).toContain('pacing=true');
    const asked = out.split('\n').filter((line) => line.includes('testing'));
    expect(asked.filter((line) => line.includes('Scavenge'))).toHaveLength(3);
    expect(asked.filter((line) => line.includes('Mark-Compact'))).toHaveLength(0);
  });
});
