/**
 * The Swift S3 fallback as the test harness uses it: a fresh Swift serves
 * every S3 operation the service relies on (src/check.ts: buckets, streamed
 * and multipart puts read back byte for byte, copies and their conditions,
 * ranges, listings, aborted uploads, presigned URLs, error codes, removals),
 * and stop() leaves no process listening, twice over.
 */
import { checkSwift } from '../src/check';
import { swiftAvailable } from '../src';

it('Swift and memcached are installed (Debian: swift swift-proxy swift-account swift-container swift-object memcached)', () => {
  expect(swiftAvailable()).toBe(true);
});

it('a fresh Swift serves every S3 operation the service uses, and stops cleanly', async () => {
  const { steps } = await checkSwift();
  // A failed step is shown with what Swift answered.
  expect(steps.filter((s) => !s.ok)).toEqual([]);
  expect(steps.map((s) => s.name)).toEqual(
    expect.arrayContaining([
      'makeBucket',
      'copyObject conditions (x-amz-copy-source-if-*)',
      'removeBucket',
      'stop() twice',
    ]),
  );
  expect(steps.length).toBeGreaterThanOrEqual(15);
}, 240_000);
