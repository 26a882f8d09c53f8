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
  // Shrunk on load: about 0.6 on this machine (44 ms against 75 ms for the full decode;
  // the WebP encode and the header read are most of it). A rotate() before the resize
  // forces a full decode: 127 ms, 1.7. Under 0.9 tells the two apart on a loaded machine.
  expect(render / decode).toBeLessThan(0.9);
}, 90_000);
