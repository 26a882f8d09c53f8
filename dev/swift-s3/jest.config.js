// The Swift S3 fallback's own test (test/check.test.ts): every S3 operation
// the service uses, against a fresh Swift, through src/check.ts. Needs
// Debian's swift packages and memcached (it fails saying what to install).
// Run alone (`npm test` here, or `npm test -w @media/swift-s3` from the
// repository's root) or as the root's `swift-s3` project. Transpiled by SWC;
// the root's `npm run typecheck` type-checks it.
/** @type {import('jest').Config} */
module.exports = {
  displayName: 'swift-s3',
  rootDir: __dirname,
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  transform: { '^.+\\.(t|j)s$': ['@swc/jest', { jsc: { target: 'es2022' } }] },
  testEnvironment: 'node',
};
