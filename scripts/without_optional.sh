#!/usr/bin/env bash
# Run a command as it would run on a fresh machine without lockcompare's optional parts: the
# README's test command must pass there (issue 37), and CI's machine has them all installed.
#
#   bash scripts/without_optional.sh -- COMMAND [ARGS...]
#
# In a private mount namespace (root and util-linux's `unshare`), every optional part the machine
# has is hidden where lockcompare and its tests look for it: a file gets /dev/null bound over it
# (not a regular file, not executable: `Path.is_file()`, `shutil.which` and `os.access(X_OK)` all
# say absent), a directory an empty tmpfs. Nothing outside the namespace changes, and the mounts end
# with the command. The Node clients' node_modules and the built Java and Go clients live in the
# checkout: run this in a clean clone (without `npm ci` or a client build) to leave those out too.
set -euo pipefail

# The optional parts, by where they are found (docs/reproduction.md: "Without them those backends are skipped").
OPTIONAL_FILES=(
  /usr/share/java/zookeeper.jar          # Debian's zookeeper (the zk-* backends' servers)
  /usr/sbin/pgbouncer /usr/bin/pgbouncer  # Debian's pgbouncer (the transaction-pooler test)
  /usr/bin/chromium /usr/bin/chromium-browser  # headless Chromium (the HTML report's browser test)
  /usr/bin/go                            # Debian's golang-go (the Go etcd client's build)
)
OPTIONAL_DIRS=(
  /usr/share/zookeeper                   # zookeeper.jar's real home
  /usr/share/gocode                      # golang-etcd-server-dev's client sources
  /usr/share/maven-repo/org/apache/curator  # libcurator-*-java (the Java Curator client)
)

if [ "${1:-}" = "--" ]; then shift; fi
if [ $# -eq 0 ]; then
  echo "usage: bash scripts/without_optional.sh -- COMMAND [ARGS...]" >&2
  exit 2
fi
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
  echo "without_optional.sh: needs root and unshare (a private mount namespace)" >&2
  exit 2
fi

hide() {
  local path
  for path in "${OPTIONAL_FILES[@]}"; do
    if [ -e "$path" ]; then mount --bind /dev/null "$path" && echo "hidden: $path" >&2; fi
  done
  for path in "${OPTIONAL_DIRS[@]}"; do
    if [ -d "$path" ]; then mount -t tmpfs -o size=1m,mode=0755 none "$path" && echo "hidden: $path/" >&2; fi
  done
  # Curator's jars sit beside the base image's in /usr/share/java: hide them one by one.
  local jar
  for jar in /usr/share/java/curator-*.jar; do
    if [ -e "$jar" ]; then mount --bind /dev/null "$jar"; fi
  done
}

export -f hide
export OPTIONAL_FILES_LIST="${OPTIONAL_FILES[*]}" OPTIONAL_DIRS_LIST="${OPTIONAL_DIRS[*]}"
exec unshare --mount --propagation private bash -c '
  set -euo pipefail
  read -r -a OPTIONAL_FILES <<<"$OPTIONAL_FILES_LIST"
  read -r -a OPTIONAL_DIRS <<<"$OPTIONAL_DIRS_LIST"
  hide
  exec "$@"
' without-optional "$@"
