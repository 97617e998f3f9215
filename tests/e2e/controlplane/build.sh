#!/usr/bin/env bash
# Builds etcd (Debian package) + kube-apiserver, kube-scheduler and kube-controller-manager v1.20.2
# from Debian bookworm's `kubernetes` source package, once per machine, into a cache outside the repo.
# Why from source: no registry reachable here ships these binaries (see shared/docs/real-control-plane.md).
# Usage: build.sh [CACHE_DIR]   (default: k8s-1.20.2 under $GANG_EXTENDER_CP_CACHE, the cache root with one
# directory per version, or under /var/cache/gang-extender; a GANG_EXTENDER_CP_CACHE that already names a
# k8s-* directory is used as it is, as before). 1.36.2 is not built: start.py unpacks it from shared/.
set -euo pipefail
ROOT=${GANG_EXTENDER_CP_CACHE:-/var/cache/gang-extender}
case "$(basename "$ROOT")" in k8s-*) DEFAULT_CACHE=$ROOT ;; *) DEFAULT_CACHE=$ROOT/k8s-1.20.2 ;; esac
CACHE=${1:-$DEFAULT_CACHE}
BIN="$CACHE/bin"
if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-scheduler" ] && [ -x "$BIN/kube-controller-manager" ] \
   && command -v etcd >/dev/null 2>&1; then
  echo "control plane already built in $BIN"; exit 0
fi
if [ "$(id -u)" != 0 ]; then echo "building the control plane needs root (apt-get)" >&2; exit 3; fi
command -v apt-get >/dev/null || { echo "building the control plane needs apt-get" >&2; exit 3; }
WORK=$(mktemp -d /tmp/k8s-src.XXXXXX)
trap 'rm -rf "$WORK"; rm -f /etc/apt/sources.list.d/gang-extender-src.sources' EXIT
awk 'BEGIN{RS="";ORS="\n\n"} NR==1' /etc/apt/sources.list.d/debian.sources \
  | sed 's/^Types: deb$/Types: deb-src/' > /etc/apt/sources.list.d/gang-extender-src.sources
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  golang-go make rsync etcd-server etcd-client golang-github-modern-go-reflect2-dev openssl curl >/dev/null
# Kubernetes 1.20 builds with Debian's Go 1.19 (golang-go); a newer Go earlier on PATH (the machine's own
# /usr/local/go) fails it, so Debian's is named here rather than found.
GO_DIR=$(ls -d /usr/lib/go-1.* 2>/dev/null | sort -V | tail -n 1)
[ -x "$GO_DIR/bin/go" ] || { echo "golang-go installed no Go under /usr/lib/go-1.*" >&2; exit 1; }
export PATH="$GO_DIR/bin:$PATH" GOROOT="$GO_DIR" GOTOOLCHAIN=local
echo "building with $("$GO_DIR/bin/go" version)"
cd "$WORK"
apt-get source --download-only kubernetes >/dev/null 2>&1
tar xzf kubernetes_*.orig.tar.gz
cd kubernetes-1.20.2
# The vendored modern-go/reflect2 v1.0.1 segfaults at run time with Go >= 1.18; Debian's 1.0.2 works.
R=vendor/github.com/modern-go/reflect2; rm -f $R/*.go $R/*.s
cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go /usr/share/gocode/src/github.com/modern-go/reflect2/*.s $R/
export GOPROXY=off GOFLAGS= CGO_ENABLED=0 KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_TREE_STATE=clean \
       KUBE_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56 GOCACHE="$WORK/gocache"
unset GOPATH
make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager" >"$WORK/make.log" 2>&1 \
  || { tail -50 "$WORK/make.log" >&2; exit 1; }
mkdir -p "$BIN.tmp"
cp _output/bin/kube-apiserver _output/bin/kube-scheduler _output/bin/kube-controller-manager "$BIN.tmp/"
rm -rf "$BIN"; mv "$BIN.tmp" "$BIN"
echo "control plane built in $BIN"
