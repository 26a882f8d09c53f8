// Five tiers share one runner (docs/testing.md): `unit` (nothing outside the
// repository: no services, no tools, no corpus beside it), `deploy` (the
// deployment files, checked with `kubectl` and `promtool`), `integration` (real
// Redis, S3 and MongoDB, resolved once by test/support/global-setup.ts), `e2e`
// (real processes: the launcher, killed workers, the production build, the
// load smoke, services going down) and `bench` (the benchmark suite's quick
// mode). The last three share the global setup: jest runs it once per run
// however many of them are selected. Beside them, the development packages
// under dev/ bring their own tests and jest configuration (`mongo-standin`,
// `swift-s3`): projects here too, so `npm test` runs them, and runnable on
// their own. Tests are transpiled by SWC; `npm run typecheck` is what
// type-checks them.
/** @type {import('jest').Config['projects'][number]} */
const common = {
  transform: { '^.+\\.(t|j)s$': ['@swc/jest', { jsc: { target: 'es2022' } }] },
  moduleNameMapper: {
    '^@shared/(.*)$': '<rootDir>/shared/$1',
    '^@api/(.*)$': '<rootDir>/api/$1',
    '^@worker/(.*)$': '<rootDir>/worker/$1',
    '^@dev/(.*)$': '<rootDir>/dev/$1',
    // file-type is ESM-only (Node loads it through require(esm)); jest's own module
    // loader cannot, so it is mapped to its entry file and SWC transpiles it and its
    // ESM dependencies (transformIgnorePatterns below).
    '^file-type$': '<rootDir>/node_modules/file-type/index.js',
    // thumbhash is ESM-only too.
    '^thumbhash$': '<rootDir>/node_modules/thumbhash/thumbhash.js',
  },
  testEnvironment: 'node',
  transformIgnorePatterns: [
    '/node_modules/(?!(thumbhash|file-type|strtok3|token-types|peek-readable|@tokenizer|uint8array-extras|@borewit)/)',
  ],
  rootDir: __dirname,
};

/** What the tiers that need the services add (they run them once per run, not once per tier). */
const withServices = {
  ...common,
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  setupFiles: ['<rootDir>/test/support/jest-env.ts'],
  // Names a test file that leaves a Redis or MongoDB client open (test/support/environment.ts).
  testEnvironment: '<rootDir>/test/support/environment.ts',
};

/** @type {import('jest').Config} */
module.exports = {
  projects: [
    { ...common, displayName: 'unit', testMatch: ['<rootDir>/test/unit/**/*.test.ts'] },
    { ...common, displayName: 'deploy', testMatch: ['<rootDir>/test/deploy/**/*.test.ts'] },
    {
      ...withServices,
      displayName: 'integration',
      testMatch: ['<rootDir>/test/integration/**/*.test.ts'],
    },
    { ...withServices, displayName: 'e2e', testMatch: ['<rootDir>/test/e2e/**/*.test.ts'] },
    { ...withServices, displayName: 'bench', testMatch: ['<rootDir>/test/bench/**/*.test.ts'] },
    // The development packages' own tests (dev/*/jest.config.js).
    '<rootDir>/dev/mongo-standin',
    '<rootDir>/dev/swift-s3',
  ],
  testTimeout: 60_000,
  // Two files at a time, the machine's two cores (jest's default is one fewer
  // than the cores: one file at a time here), longest first
  // (test/support/sequencer.js). docs/testing.md says what this asks of a test.
  maxWorkers: 2,
  testSequencer: '<rootDir>/test/support/sequencer.js',
};
