/**
 * The render pipeline (worker/image/render.ts) lets libvips shrink a JPEG on
 * load: a 400 px render of a 12 MP photo takes far less CPU than decoding
 * the photo whole. Measured in CPU time, not wall time, as a ratio in the
 * same run, and in a process of its own (test/support/render-shrink-probe.ts)
 * so neither a loaded machine nor another test's leftover work in this jest
 * worker changes the outcome. A `rotate()` or an `extract()` put before the
 * resize forces a full decode and fails it.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';

it('renders a 12 MP JPEG to 400 px with a fraction of the CPU a full decode takes', () => {
  const out = execFileSync(
    process.execPath,
    ['--import', 'tsx', join(__dirname, '../support/render-shrink-probe.ts')],
    { encoding: 'utf8', timeout: 60_000 },
  );
  const { width, height, decode, render } = JSON.parse(out.trim().split('\n').pop()!) as {
    width: number;
    height: number;
    decode: number;
    render: number;
  };
  expect([width, height]).toEqual([400, 300]);
  // Shrunk on load: about a quarter here (55 ms against 200 ms); a full decode plus resize would be more than 1.
  expect(render / decode).toBeLessThan(0.6);
}, 90_000);
