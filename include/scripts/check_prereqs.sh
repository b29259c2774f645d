#!/usr/bin/env bash
# Set-up prerequisites: stop with one line naming whatever is missing.
# --test: also what only the tests need (a PostgreSQL server), installed when run as root.
set -u
missing=()
command -v python3.11 >/dev/null 2>&1 || missing+=("Python 3.11 (python3.11 on PATH)")
if command -v java >/dev/null 2>&1; then
  major=$(java -version 2>&1 | sed -nE 's/.*version "([0-9]+).*/\1/p' | head -1)
  [ "${major:-0}" -ge 17 ] || missing+=("Java 17 or newer (found Java ${major:-unknown})")
else
  missing+=("Java 17 (java on PATH)")
fi
command -v mvn >/dev/null 2>&1 || missing+=("Maven (mvn on PATH)")
if [ ${#missing[@]} -gt 0 ]; then
  printf 'set-up stopped: missing %s\n' "$(IFS=';'; echo "${missing[*]}" | sed 's/;/; /g')" >&2
  exit 1
fi
[ "${1:-}" = "--test" ] || exit 0
# Debian's PostgreSQL server binaries: the tests run Airflow's metadata database on a server
# of their own (tests/e2e/postgres.py). Installed here when missing and run as root.
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
  if [ "$(id -u 2>/dev/null)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "set-up: installing Debian's PostgreSQL server (apt-get install postgresql)" >&2
    # No cluster of the package's own on port 5432: the tests start theirs on free ports.
    mkdir -p /etc/postgresql-common
    [ -e /etc/postgresql-common/createcluster.conf ] \
      || echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf
    if ! { DEBIAN_FRONTEND=noninteractive apt-get -qq update \
           && DEBIAN_FRONTEND=noninteractive apt-get -qq install -y \
              -o Dpkg::Options::=--force-confold postgresql; } >/dev/null; then
      echo "set-up stopped: apt-get install postgresql failed" >&2
      exit 1
    fi
  else
    echo "note: no PostgreSQL server under /usr/lib/postgresql: the PostgreSQL test will" \
         "fail; install Debian's postgresql package (as root: apt-get install postgresql)" >&2
  fi
fi
