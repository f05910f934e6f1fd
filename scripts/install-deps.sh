#!/usr/bin/env bash
# Installs the Debian packages that building and testing hone need. Idempotent:
# when everything is present it changes nothing and asks no package server.
# --hip adds hipcc and the HIP headers, for the build's HIP check of the GPU
# kernels (cmake/hip_check.cmake); the test command uses it.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates
  libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev libopenblas-openmp-dev
  libfmt-dev nlohmann-json3-dev libcli11-dev libyaml-cpp-dev
  libzstd-dev libxxhash-dev
  zlib1g-dev zstd python3-numpy python3-jinja2 clang libclang-rt-14-dev
  libpcre2-dev libicu-dev libsentencepiece-dev sentencepiece fortunes
  libopenmpi-dev openmpi-bin slurm-wlm munge
)
# fetch-assets.sh uses npm; a Node.js from elsewhere that brings its own npm is kept.
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
case "${1:-}" in
  "") ;;
  --hip) packages+=(hipcc libamdhip64-dev) ;;
  *) echo "install-deps: unknown option '$1' (expected --hip or nothing)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
