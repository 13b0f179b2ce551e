#!/usr/bin/env bash
# Build lockcompare's Curator client (clients/java): javac against Debian's jars, no network, no Maven.
#
#   apt-get install -y libcurator-recipes-java   # Curator 5.4 + ZooKeeper 3.8 client + Guava + SLF4J
#   bash clients/java/build.sh                   # -> clients/java/build/curator-mutex.jar (gitignored)
#
# The jar names Debian's jars in its Class-Path (as Debian's own jars name theirs), so it runs with
# `java -jar build/curator-mutex.jar` and nothing else. slf4j-jdk14 routes SLF4J to java.util.logging,
# where the client reads ZooKeeper's ping log lines (see CuratorMutexClient.java).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
java_dir="${LOCKCOMPARE_JAVA_DIR:-/usr/share/java}"
jars=(curator-recipes curator-framework curator-client zookeeper zookeeper-jute slf4j-api slf4j-jdk14 guava)
classpath=()
for name in "${jars[@]}"; do
  jar="$java_dir/$name.jar"
  if [[ ! -f "$jar" ]]; then
    echo "clients/java/build.sh: $jar is missing: apt-get install -y libcurator-recipes-java" >&2
    exit 1
  fi
  classpath+=("$jar")
done
for tool in javac jar; do
  command -v "$tool" >/dev/null || { echo "clients/java/build.sh: no $tool (a JDK): apt-get install -y default-jdk-headless" >&2; exit 1; }
done
build="$here/build"
rm -rf "$build/classes" "$build/curator-mutex.jar"
mkdir -p "$build/classes"
javac -nowarn --release 17 -encoding UTF-8 -d "$build/classes" \
  -cp "$(IFS=:; echo "${classpath[*]}")" "$here/CuratorMutexClient.java" "$here/Json.java"
{
  echo "Main-Class: CuratorMutexClient"
  echo "Class-Path: ${classpath[*]}"
} > "$build/manifest.txt"  # the jar tool wraps the long line as manifests require
jar --create --file "$build/curator-mutex.jar" --manifest "$build/manifest.txt" -C "$build/classes" .
echo "built $build/curator-mutex.jar"
