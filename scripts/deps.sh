#!/usr/bin/env bash
# Installs the Debian packages quill builds and tests with, if any is missing (needs root or sudo).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libjansson-dev libpcre2-dev libutf8proc-dev libcmocka-dev
      libmicrohttpd-dev curl)
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# curl may come from elsewhere (the image's own build): only its absence matters
command -v curl >/dev/null 2>&1 && missing=("${missing[@]/curl}")
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "deps: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi
