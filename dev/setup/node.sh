# shellcheck shell=bash
# Sourced by dev/start.sh, dev/test.sh and .ci/run: Node 24 first on the PATH
# (installed from the npm registry when the machine's is older, .ci/node24),
# then the project's dependencies installed when node_modules is missing or
# older than package-lock.json, or always with SETUP_NPM_CI=always (CI) (`npm ci`; where npm refuses its own lock file,
# npm/cli#9846, `npm install` of the same locked versions).
# shellcheck source=.ci/node24
source .ci/node24 || return 1
export NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false NPM_CONFIG_AUDIT=false
if [ "${SETUP_NPM_CI:-}" = always ] || [ ! -f node_modules/.package-lock.json ] \
  || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing the dependencies (npm ci)"
  if ! npm ci --no-audit --no-fund; then
    echo "setup: npm ci refused the lock file; installing the locked versions with npm install"
    npm install --no-audit --no-fund --no-save || return 1
  fi
fi
