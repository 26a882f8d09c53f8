// The order `npm test` starts its files in, two at a time (jest.config.js's
// maxWorkers). Jest's own order is by each file's last duration, which a fresh
// clone (CI) does not have, and then by size: the quick benchmarks (2.5–3 min,
// a small file) would start last and run alone at the end. The files known to
// take longest start first, in this order; the rest follow in jest's order.
// A file missing from the list costs only a worse packing, never a failure.
const Sequencer = require('@jest/test-sequencer').default;

const LONGEST_FIRST = [
  'test/bench/bench-quick.test.ts',
  'test/e2e/console.test.ts',
  'test/e2e/launcher.test.ts',
  'test/e2e/production-build.test.ts',
  'test/e2e/resumable-kill.test.ts',
  'test/e2e/first-hour.test.ts',
  'dev/swift-s3/test/check.test.ts',
  'test/unit/image-adapter.test.ts',
  'test/e2e/docs-page.test.ts',
];

class LongestFirst extends Sequencer {
  sort(tests) {
    const sorted = super.sort(tests);
    const rank = (test) => {
      const i = LONGEST_FIRST.findIndex((path) => test.path.endsWith(path));
      return i === -1 ? LONGEST_FIRST.length : i;
    };
    // Array.prototype.sort is stable: the rest keep jest's order.
    return [...sorted].sort((a, b) => rank(a) - rank(b));
  }
}

module.exports = LongestFirst;
