#!/usr/bin/env bash
# tools/gpu_debs.sh — run here (Debian 12), before the first tools/gpu_run.sh call of a fresh checkout:
# downloads the Debian packages whose headers and libraries the GPU machine lacks (PCRE2, ICU, Highway,
# xxhash) into .carry/debs (git-ignored), which the device call carries (carry [".carry"]) and
# gpu_run.sh unpacks into /tmp/pfx there. Idempotent: packages already present are not fetched again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p .carry/debs
cd .carry/debs
pkgs=(libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libicu-dev libicu72 libhwy-dev libhwy1
      libxxhash-dev)
missing=()
for p in "${pkgs[@]}"; do
  compgen -G "${p}_*.deb" > /dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[gpu_debs] downloading: ${missing[*]}"
  apt-get download "${missing[@]}"
else
  echo "[gpu_debs] .carry/debs: all present"
fi
du -sh . | sed 's/^/[gpu_debs] /'
