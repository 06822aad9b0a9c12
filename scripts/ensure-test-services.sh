#!/usr/bin/env bash
# Make sure the real peers the tests talk to are installed and running; reuse what already runs.
# Idempotent and quick when everything is there. Each peer is named once below.
set -euo pipefail

need_apt=()
apt_update_done=0

# Debian packages whose programs the tests run. Add a line per peer: "<command> <package>".
while read -r cmd pkg; do
  [ -z "$cmd" ] && continue
  command -v "$cmd" >/dev/null 2>&1 || need_apt+=("$pkg")
done <<'PEERS'
prometheus prometheus
PEERS

if [ "${#need_apt[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
    echo "ensure-test-services: missing ${need_apt[*]} and no root to install them" >&2
    exit 1
  fi
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if [ "$apt_update_done" -eq 0 ]; then $SUDO apt-get update -qq >/dev/null; apt_update_done=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
