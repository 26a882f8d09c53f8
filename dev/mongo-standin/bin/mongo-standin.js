#!/usr/bin/env node
// The `mongo-standin` command: the stand-in runs from its TypeScript source
// through tsx (development tooling, never compiled). Usage: src/main.ts.
require('tsx/cjs');
require('../src/main.ts');
