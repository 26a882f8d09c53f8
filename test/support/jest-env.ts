// Runs in every integration test worker before the test file.
process.env.NODE_ENV = 'test';
process.env.LOG_LEVEL ??= 'silent';
