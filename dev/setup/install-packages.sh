#!/usr/bin/env bash
# Installs the system packages the service or its tests use when they are
# missing: the one install path of `npm start` (dev/start.sh), `dev/test.sh`
# and CI (.ci/run), so a newcomer's machine and CI's are set up the same way.
#
#   dev/setup/install-packages.sh start   what `npm start` needs: redis-server
#   dev/setup/install-packages.sh test    what `npm test` needs (below)
#
# Debian/Ubuntu: apt-get, as root or through sudo. macOS: Homebrew. Anywhere
# else, or without the rights to install, it prints the one command to run
# and exits 1. For the tests, a machine with a Docker engine may skip the
# service packages (the harness starts Redis and S3 through testcontainers;
# docs/testing.md).
set -euo pipefail
what="${1:-test}"
case "$what" in start | test) ;; *) echo "usage: $0 start|test" >&2; exit 2 ;; esac

have() { command -v "$1" >/dev/null 2>&1; }

# Debian packages, with the reason each is there.
need=()
need_bare=() # installed without their recommended packages
have redis-server || need+=(redis-server) # the embedded Redis of npm start and of the test harness
if [ "$what" = test ]; then
  # OpenStack Swift's s3api (+ memcached): the S3 the harness falls back to without Docker.
  for bin in swift-proxy-server swift-account-server swift-container-server swift-object-server swift-ring-builder; do
    have "$bin" || { need+=(swift swift-proxy swift-account swift-container swift-object); break; }
  done
  have memcached || need+=(memcached)
  # qpdf: the PDF worker repairs damaged inputs with it (and the merge benchmark compares against it).
  have qpdf || need+=(qpdf)
  # chromium: test/e2e/browser-page.test.ts shows a signed image in a page, headless.
  have chromium || need+=(chromium)
  # clamd (clamav-daemon): test/integration/scan starts its own with a signature database it writes.
  have clamd || [ -x /usr/sbin/clamd ] || need+=(clamav-daemon)
  # GNU time: the merge benchmark (npm test runs its quick mode) reads qpdf's peak RSS from it.
  [ -x /usr/bin/time ] || need+=(time)
  # promtool (Debian's prometheus package; its recommended node exporter is not
  # needed): test/deploy/prometheus-rules.test.ts checks deploy/prometheus/alerts.yml with it.
  have promtool || need_bare+=(prometheus)
fi
((${#need[@]} + ${#need_bare[@]})) || exit 0
all="${need[*]}${need_bare[*]:+ ${need_bare[*]}}"

if have apt-get; then
  if [ "$(id -u)" -eq 0 ]; then
    sudo=()
  elif have sudo && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
  elif have sudo && [ -t 0 ]; then
    sudo=(sudo) # asks for the password in the terminal
  else
    echo "setup: missing ${all}; run: sudo apt-get install -y ${need[*]}${need_bare[*]:+ && sudo apt-get install -y --no-install-recommends ${need_bare[*]}}" >&2
    exit 1
  fi
  echo "setup: installing Debian packages: ${all}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  if ((${#need[@]})); then "${sudo[@]}" apt-get install -y -qq "${need[@]}" >/dev/null; fi
  if ((${#need_bare[@]})); then
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need_bare[@]}" >/dev/null
  fi
  exit 0
fi

if [ "$(uname -s)" = Darwin ]; then
  # Homebrew has no OpenStack Swift: on macOS the tests' S3 comes from Docker (testcontainers).
  brew_need=()
  cask_need=()
  have redis-server || brew_need+=(redis)
  if [ "$what" = test ]; then
    have qpdf || brew_need+=(qpdf)
    have promtool || brew_need+=(prometheus)
    have clamd || brew_need+=(clamav)
    have chromium || [ -d /Applications/Chromium.app ] || cask_need+=(chromium)
  fi
  ((${#brew_need[@]} + ${#cask_need[@]})) || exit 0
  if have brew; then
    echo "setup: installing with Homebrew: ${brew_need[*]} ${cask_need[*]}"
    if ((${#brew_need[@]})); then brew install "${brew_need[@]}"; fi
    if ((${#cask_need[@]})); then brew install --cask "${cask_need[@]}"; fi
    exit 0
  fi
  echo "setup: missing ${brew_need[*]} ${cask_need[*]}; install Homebrew (https://brew.sh), then run: brew install ${brew_need[*]}${cask_need[*]:+ && brew install --cask ${cask_need[*]}}" >&2
  exit 1
fi

echo "setup: missing ${all} and no apt-get or Homebrew here: install them with your package manager, or run the tests with a Docker engine (testcontainers)" >&2
exit 1
