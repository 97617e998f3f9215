#!/usr/bin/env bash
# Builds the programs an upstream Go module ships, as a module directory of ours names them (`tool` lines
# of its go.mod, at the versions its go.mod and go.sum pin), from the Go module proxy, once per machine
# into the control-plane cache. Used for the Kubernetes control plane (kubernetes/: kube-apiserver,
# kube-scheduler, kube-controller-manager of k8s.io/kubernetes, its staging modules replaced by their
# releases), for KAI's podgrouper (kai/), the Kubeflow training-operator (training-operator/), the JobSet
# controller (jobset/), kwok (kwok/) and etcd 3.6 (etcd/, the store of the 1.36.2 and 1.37.2 planes; 1.20.2
# runs on Debian's etcd 3.4, which build.sh installs).
# Usage: module-build.sh MODULE_DIR CACHE_DIR
#   K8S_BUILD_PARALLEL=N caps the compiler's parallelism (go build -p N); unset, Go uses every core.
# Prints one line with the seconds the build took; exits 0 at once when every program is there.
set -euo pipefail
MOD=$(cd "${1:?usage: module-build.sh MODULE_DIR CACHE_DIR}" && pwd)
CACHE=${2:?usage: module-build.sh MODULE_DIR CACHE_DIR}
BIN="$CACHE/bin"
TOOLS=$(awk '$1 == "tool" && $2 != "(" { print $2 } /^tool \($/ { t = 1; next } t && /^\)/ { t = 0 } t { print $1 }' \
  "$MOD/go.mod")
[ -n "$TOOLS" ] || { echo "no tool lines in $MOD/go.mod" >&2; exit 1; }
# A program is named after its package's last path element, or as a `// program <tool> <name>` line of the
# go.mod says (a module-root main such as go.etcd.io/etcd/server/v3 would otherwise be called v3).
program() {
  local named
  named=$(awk -v t="$1" '$1 == "//" && $2 == "program" && $3 == t { print $4; exit }' "$MOD/go.mod")
  echo "${named:-$(basename "$1")}"
}
built() { for t in $TOOLS; do [ -x "$BIN/$(program "$t")" ] || return 1; done; }
if built; then echo "already built in $BIN"; exit 0; fi
GO=$(command -v go || true); [ -n "$GO" ] || GO=/usr/local/go/bin/go
[ -x "$GO" ] || { echo "building $MOD needs Go on PATH (or /usr/local/go/bin/go)" >&2; exit 3; }
mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9  # one build per machine even when several test sessions start at once
if built; then echo "already built in $BIN"; exit 0; fi
WORK=$(mktemp -d "$CACHE/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# As kubectl-build.sh: the machine's Go, never a downloaded toolchain; go.sum pins every module and
# -mod=readonly refuses a go.mod that would need changing; module and build caches of its own, dropped
# afterwards; no cgo, as upstream's release binaries.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -modcacherw -buildvcs=false" \
       GOMODCACHE="$WORK/mod" GOCACHE="$WORK/build" GOPATH="$WORK/gopath"
LDFLAGS="-s -w"
# k8s.io/kubernetes: what hack/lib/version.sh stamps, so each component reports its release (the API
# server's and kube-scheduler's version checks, and our own discovery, read it).
K8S=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ { print $2; exit }' "$MOD/go.mod")
if [ -n "$K8S" ]; then
  MINOR=$(echo "$K8S" | cut -d. -f2)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDFLAGS="$LDFLAGS -X $pkg.gitVersion=$K8S -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR"
    LDFLAGS="$LDFLAGS -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
fi
PARALLEL=()
[ -n "${K8S_BUILD_PARALLEL:-}" ] && PARALLEL=(-p "$K8S_BUILD_PARALLEL")
echo "building $(for t in $TOOLS; do printf '%s ' "$(program "$t")"; done)with $("$GO" version)"
start=$(date +%s)
for t in $TOOLS; do
  name=$(program "$t")
  (cd "$MOD" && "$GO" build "${PARALLEL[@]}" -trimpath -ldflags "$LDFLAGS" -o "$WORK/out/$name" "$t") \
    >>"$WORK/build.log" 2>&1 || { echo "building $name failed:" >&2; tail -20 "$WORK/build.log" >&2; exit 1; }
  if [ -n "$K8S" ]; then
    GOT=$("$WORK/out/$name" --version 2>&1 | awk '{ print $2; exit }')
    [ "$GOT" = "$K8S" ] || { echo "built $name reports '$GOT', expected $K8S" >&2; exit 1; }
  fi
done
mkdir -p "$BIN.tmp"; mv "$WORK"/out/* "$BIN.tmp/"
rm -rf "$BIN"; mv "$BIN.tmp" "$BIN"
echo "built in $BIN in $(( $(date +%s) - start )) s"
