#!/usr/bin/env bash
# Installs what gridledger needs on a Debian 12 machine, idempotently:
# system packages (as root) and the project's .venv. Used by the Makefile and .ci/run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export DEBIAN_FRONTEND=noninteractive

# The object store's binary takes minutes to compile: its build starts first, in the
# background, beside the Debian packages, the venv and the images. infra/weed.py needs only
# python3 (before the venv exists); `dev up` waits for the build, or does it when it failed
# (the reason is in <home>/logs/seaweedfs-build.log either way).
store_build_started=false
start_store_build() {
  local home=${GRIDLEDGER_HOME:-${PWD}/.gridledger}
  if [[ ${store_build_started} == false ]] && command -v python3 >/dev/null 2>&1; then
    mkdir -p "${home}/logs"
    nohup python3 infra/weed.py --home "${home}" >> "${home}/logs/seaweedfs-build.log" 2>&1 &
    store_build_started=true
  fi
}
start_store_build

# docker-compose: `docker-compose config` validates docker-compose.yml (tests, .ci/run).
# Go is not a package here (Debian 12 ships 1.19): the store's build (above) uses an installed
# Go >= 1.21 or fetches the toolchain from the Go module proxy (infra/weed.py).
# chromium, chromium-driver: the console's browser tests (tests/console, Selenium).
# faketime: the chaos suite's clock faults and tests/system's shifted agent (libfaketime).
PACKAGES=(docker.io docker-compose debootstrap busybox-static postgresql openjdk-17-jre-headless
          maven faketime ca-certificates python3 python3-venv make chromium chromium-driver)

missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "${package}" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("${package}")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing Debian packages: ${missing[*]}; run as root or install them first" >&2
    exit 1
  fi
  echo "installing ${missing[*]}"
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  start_store_build  # when python3 came with these packages
fi

# The venv is reinstalled only when a pyproject.toml changed since the last install.
stamp=.venv/.gridledger-installed
want=$(cat pyproject.toml client/pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
if [[ ! -f ${stamp} || $(cat "${stamp}") != "${want}" ]]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # The server depends on the client distribution (client/), which no index has: both in
  # one resolve, so that pip takes gridledger-client from here.
  .venv/bin/python -m pip install -q -e ./client -e '.[dev,bench]'
  # The wheels a fresh venv installs the client from, offline (tests/client/test_clean_venv.py):
  # its dependencies and its build backend, as client/pyproject.toml's build-system requires
  # it (an unbounded `flit_core` took a major version the client's build refuses).
  mapfile -t backend < <(.venv/bin/python -c 'import tomllib; print(*tomllib.load(
      open("client/pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")')
  .venv/bin/python -m pip wheel -q -w "${GRIDLEDGER_CACHE:-${HOME}/.cache/gridledger}/wheels" \
    ./client "${backend[@]}"
  echo "${want}" > "${stamp}"
fi
