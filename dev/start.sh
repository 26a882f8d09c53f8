#!/usr/bin/env bash
# `npm start` (and `bash dev/start.sh` where npm's own Node is older): Node 24
# and the dependencies when missing (dev/setup/node.sh), redis-server when
# missing (dev/setup/install-packages.sh), then the launcher (dev/launcher.ts),
# which builds dist/ only when a source changed and starts everything.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=dev/setup/node.sh
source dev/setup/node.sh
if [ -z "${REDIS_URL:-}" ]; then dev/setup/install-packages.sh start; fi
exec node --enable-source-maps --import tsx dev/launcher.ts "$@"
