#!/usr/bin/env bash
# Prints the home of a JDK of at least version $1 (default 22: the FFM API that java/ binds the
# C library with): $JAVA_HOME if it is one, else the newest under /usr/lib/jvm (where Debian's
# packages and these machines' Temurin 25 install). Fails in one line if there is none.
set -euo pipefail
need=${1:-22}
version() { "$1/bin/java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p'; }
for home in ${JAVA_HOME:-} $(ls -d /usr/lib/jvm/*/ 2>/dev/null | sort -rV); do
  home=${home%/}
  [ -x "$home/bin/javac" ] || continue
  v=$(version "$home")
  if [ -n "$v" ] && [ "${v%%.*}" -ge "$need" ]; then
    echo "$home"
    exit 0
  fi
done
echo "jdk.sh: no JDK $need or later (set JAVA_HOME to one, or install one under /usr/lib/jvm)" >&2
exit 1
