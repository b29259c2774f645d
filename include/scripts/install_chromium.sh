#!/usr/bin/env bash
# Debian's Chromium for the browser tests (Playwright drives it: it cannot download its own
# browsers here). Installed with apt-get when missing, as root or through sudo; otherwise
# one line saying what to install.
set -eu
command -v chromium >/dev/null 2>&1 && exit 0
if [ "$(id -u)" -eq 0 ]; then
  run=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  run=(sudo -n)
else
  echo "set-up stopped: the browser tests need Debian's chromium (apt-get install chromium)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "installing Debian's chromium for the browser tests (apt-get) ..."
"${run[@]}" apt-get install -y -q --no-install-recommends chromium >/dev/null \
  || { "${run[@]}" apt-get update -q >/dev/null && \
       "${run[@]}" apt-get install -y -q --no-install-recommends chromium >/dev/null; }
command -v chromium >/dev/null
