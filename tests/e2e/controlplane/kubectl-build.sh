#!/usr/bin/env bash
# Builds kubectl from its Go modules, at the versions kubectl/go.mod and go.sum pin, once per machine into
# the control-plane cache, so the e2e tier runs one known kubectl (matching the 1.36.2 control plane)
# rather than whatever is on PATH. Needs the machine's Go (>= the go.mod's) and the Go module proxy.
# Usage: kubectl-build.sh [CACHE_DIR]   (default: kubectl-<version> under $GANG_EXTENDER_CP_CACHE, the
# cache root, or under /var/cache/gang-extender; as in build.sh, a root naming k8s-* means its parent).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
MOD="$HERE/kubectl"
# k8s.io/kubectl v0.X.Y is Kubernetes 1.X.Y
MODVER=$(awk '$1 == "k8s.io/kubectl" { print $2; exit }' "$MOD/go.mod")
case "$MODVER" in v0.*) ;; *) echo "no k8s.io/kubectl v0.X.Y in $MOD/go.mod" >&2; exit 1 ;; esac
VERSION=1.${MODVER#v0.}
ROOT=${GANG_EXTENDER_CP_CACHE:-/var/cache/gang-extender}
case "$(basename "$ROOT")" in k8s-*) ROOT=$(dirname "$ROOT") ;; esac
CACHE=${1:-$ROOT/kubectl-$VERSION}
BIN="$CACHE/bin"
if [ -x "$BIN/kubectl" ]; then echo "kubectl already built in $BIN"; exit 0; fi
GO=$(command -v go || true); [ -n "$GO" ] || GO=/usr/local/go/bin/go
[ -x "$GO" ] || { echo "building kubectl needs Go on PATH (or /usr/local/go/bin/go)" >&2; exit 3; }
mkdir -p "$CACHE"
WORK=$(mktemp -d "$CACHE/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# The machine's own Go, never a downloaded toolchain; the go.sum pins every module (-mod=readonly refuses
# a go.mod that would need changing); a module and build cache of its own, dropped afterwards
# (-modcacherw lets rm remove it); no cgo, so the binary runs on any machine of this kind.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -modcacherw -buildvcs=false" \
       GOMODCACHE="$WORK/mod" GOCACHE="$WORK/build" GOPATH="$WORK/gopath"
echo "building kubectl v$VERSION with $("$GO" version)"
V=k8s.io/component-base/version
MINOR=$(echo "$VERSION" | cut -d. -f2)
LDFLAGS="-s -w -X $V.gitVersion=v$VERSION -X $V.gitMajor=1 -X $V.gitMinor=$MINOR -X $V.gitTreeState=clean"
(cd "$MOD" && "$GO" build -trimpath -ldflags "$LDFLAGS" -o "$WORK/kubectl" .) >"$WORK/build.log" 2>&1 \
  || { tail -20 "$WORK/build.log" >&2; exit 1; }
GOT=$("$WORK/kubectl" version --client -o json | awk -F'"' '/"gitVersion"/ { print $4; exit }')
[ "$GOT" = "v$VERSION" ] || { echo "built kubectl reports $GOT, expected v$VERSION" >&2; exit 1; }
mkdir -p "$BIN.tmp"; mv "$WORK/kubectl" "$BIN.tmp/kubectl"
rm -rf "$BIN"; mv "$BIN.tmp" "$BIN"
echo "kubectl v$VERSION built in $BIN"
