#!/usr/bin/env bash
# `npm test`: every tier, in two jest runs (docs/testing.md, "Tiers").
#
# 1. unit, deploy, integration and the dev packages' tests, two test files
#    at a time (jest workers): these run in the test process against the
#    services, and about half their time is waiting on them, so two at once
#    take ~1.5 times less than one after another on 2 cores.
# 2. e2e and bench, one file at a time: each starts several real processes
#    (the API, workers, Chromium, the benchmark's stack) that need the cores
#    to themselves.
#
# Both runs always run; the exit code is the first failing run's. With
# arguments (`npm test -- <path>`, `npm test -- -t name`), one jest run with
# them instead, as jest itself runs them.
set -uo pipefail
if [ $# -gt 0 ]; then exec jest "$@"; fi
status=0
jest --selectProjects unit deploy integration mongo-standin swift-s3 --maxWorkers=2 || status=$?
code=0
jest --selectProjects e2e bench || code=$?
if [ "$status" -eq 0 ]; then status=$code; fi
exit "$status"
