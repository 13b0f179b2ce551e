#!/usr/bin/env bash
# Build the Go lock client (etcd's clientv3/concurrency.Mutex) offline from Debian's packages:
#   apt-get install -y golang-go golang-etcd-server-dev     # Go 1.19, etcd 3.4 sources in /usr/share/gocode
#   bash clients/go/build.sh                                # -> clients/go/build/etcd-lock-client
# GOPATH mode (no modules, no network): every import resolves under /usr/share/gocode.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gocode=/usr/share/gocode
if ! command -v go >/dev/null; then
  echo "go not found: apt-get install -y golang-go golang-etcd-server-dev" >&2
  exit 1
fi
if [ ! -d "$gocode/src/go.etcd.io/etcd/clientv3/concurrency" ]; then
  echo "etcd's Go sources not found in $gocode: apt-get install -y golang-etcd-server-dev" >&2
  exit 1
fi
mkdir -p "$here/build"
# A private build cache beside the binary (HOME may not be writable, and nothing lands outside the tree),
# unless GOCACHE names one: a warm cache skips recompiling etcd's client and gRPC (~18 s alone on 2 cores).
export GOPATH="$gocode" GO111MODULE=off GOCACHE="${GOCACHE:-$here/build/.gocache}" GOPROXY=off CGO_ENABLED=0
cd "$here"
# The etcd client's version, stamped into the binary (its hello says it; every row records it): the
# Debian package's version when it is installed that way, else what the sources' version.go says.
etcd_version="$(dpkg-query -W -f='${Version}' golang-etcd-server-dev 2>/dev/null || true)"
if [ -z "$etcd_version" ]; then
  etcd_version="$(sed -n 's/^[[:space:]]*Version[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' \
    "$gocode/src/go.etcd.io/etcd/version/version.go" | head -n 1)"
fi
go build -ldflags "-X main.etcdVersion=${etcd_version}" -o build/etcd-lock-client.tmp main.go
mv build/etcd-lock-client.tmp build/etcd-lock-client
echo "built $here/build/etcd-lock-client"
