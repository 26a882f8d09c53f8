// The stand-in's own tests: the wire protocol and the `mongo-standin` command
// (protocol.test.ts), and the conformance suites (mongoose-compat*.test.ts),
// which assert what real MongoDB does, against a fresh stand-in or, with
// MONGODB_URI set, against that server. Run alone (`npm test` here, or
// `npm test -w @media/mongo-standin` from the repository's root) or as the
// root's `mongo-standin` project. Transpiled by SWC; the root's
// `npm run typecheck` type-checks them.
/** @type {import('jest').Config} */
module.exports = {
  displayName: 'mongo-standin',
  rootDir: __dirname,
  testMatch: ['<rootDir>/test/**/*.test.ts'],
  transform: { '^.+\\.(t|j)s$': ['@swc/jest', { jsc: { target: 'es2022' } }] },
  testEnvironment: 'node',
  testTimeout: 60_000,
};
