#!/usr/bin/env bash
# One command for the tests on a fresh machine: the system packages the tests
# use (dev/setup/install-packages.sh test; where it cannot install, it prints
# the one command to run, and goes on only with a Docker engine), Node 24 and
# the dependencies (dev/setup/node.sh), dist/ built when a source changed (the
# newcomer test starts it as `npm start` does), then `npm test` with any
# arguments given. CI (.ci/run) walks the same steps.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! dev/setup/install-packages.sh test; then
  # With a Docker engine the harness takes Redis and S3 from testcontainers;
  # a test needing one of the missing tools says which.
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    echo "setup: going on with the Docker engine for the services (testcontainers)" >&2
  else
    exit 1
  fi
fi
# shellcheck source=dev/setup/node.sh
source dev/setup/node.sh
node --import tsx dev/build-if-stale.ts
exec npm test -- "$@"
