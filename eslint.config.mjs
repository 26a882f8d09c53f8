// Type-aware lint: the rules STYLE.md asks for (floating/misused promises,
// exhaustive switches) plus typescript-eslint's recommended type-checked set.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import prettier from 'eslint-config-prettier';

/** Production code never imports development tooling (dev/): see the block that uses it. */
const NO_DEV_IMPORTS = {
  regex: '^(@dev(/|$)|@media/|(\\.\\./)+dev(/|$))',
  message:
    'api/, worker/ and shared/ are production code and must not import dev/ (development tooling, never shipped); see docs/architecture.md.',
};

export default tseslint.config(
  {
    ignores: [
      'dist/**',
      'coverage/**',
      'node_modules/**',
      '.data/**',
      'eslint.config.mjs',
      '**/jest.config.js',
      // Jest's configuration too (jest.config.js names it), CommonJS as the configs are.
      'test/support/sequencer.js',
      // Generated from api/openapi.yaml and compiled under --strict by its own test.
      'test/support/generated-client/**',
      // Generated from api/openapi.yaml by api/console/generate-client.mjs (git-ignored).
      'api/console/src/generated/**',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/switch-exhaustiveness-check': 'error',
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_' },
      ],
      'no-console': 'error',
    },
  },
  {
    // Production code never imports development tooling (dev/: the launcher, the
    // embedded services, and the packages @media/mongo-standin and
    // @media/swift-s3): it is not built into dist/ and its dependencies are not
    // installed in the images (docs/architecture.md).
    files: ['api/**/*.ts', 'worker/**/*.ts', 'shared/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [NO_DEV_IMPORTS],
        },
      ],
      // The same for import() and require(), which no-restricted-imports does not see.
      'no-restricted-syntax': [
        'error',
        ...[
          'ImportExpression > Literal.source',
          "CallExpression[callee.name='require'] > Literal",
        ].map((node) => ({
          selector: `${node}[value=/^(@dev(\\/|$)|@media\\/|(\\.\\.\\/)+dev(\\/|$))/]`,
          message: 'api/, worker/ and shared/ are production code and must not load dev/.',
        })),
      ],
    },
  },
  {
    // The API's services and the domain helpers they use never see HTTP or the queue
    // library: routes hand them a caller and a typed input (docs/architecture.md).
    // (This block replaces the one above for these files, so it repeats its dev/ rule.)
    files: ['api/services/**/*.ts', 'api/domain/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            NO_DEV_IMPORTS,
            {
              regex: '^(express|busboy|bullmq|passport)(/|$)',
              message:
                'Services take (caller, input): HTTP and the queue library stay in routes, middleware and shared/queue (docs/architecture.md).',
            },
            {
              regex: '^(@api/|\\.\\./)(routes|middleware|http|forms|cli|app|main)(/|$)',
              message:
                'Imports point one way, transport → services → adapters: a service or domain helper never imports the transport (docs/architecture.md).',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/unbound-method': 'off',
    },
  },
  {
    // Plain scripts (ESM ones run by tests in their own Node process, the dev
    // packages' CommonJS commands): linted without type information.
    files: ['**/*.mjs', 'dev/*/bin/*.js'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: {
      ...tseslint.configs.disableTypeChecked.languageOptions,
      globals: { process: 'readonly', URL: 'readonly', require: 'readonly' },
    },
  },
  {
    // A dev package's command is CommonJS: it registers tsx, then requires its TypeScript entry.
    files: ['dev/*/bin/*.js'],
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  prettier,
);
