#!/usr/bin/env bash
# Everything `make demo` and `make test` need, built once and cached:
# the app venv, the vLLM venv, this checkout installed into the app venv, and
# the converted model. Writes .ratchet/env, which the Makefile sources.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
mkdir -p .ratchet
start=$SECONDS
# The two venvs build in parallel on a fresh machine (each ~1.5 min).
ops/bootstrap.sh vllm > .ratchet/vllm-venv.path &
vllm_build=$!
app=$(ops/bootstrap.sh app)
wait $vllm_build || { echo "setup: building the vLLM venv failed" >&2; exit 1; }
vllm=$(cat .ratchet/vllm-venv.path)
# The venvs are shared between checkouts: point the app venv at this one.
if [ ! -x "$app/bin/ratchet" ] || ! "$app/bin/python" -I -c "import ops, os, sys; sys.exit(os.path.dirname(os.path.dirname(os.path.abspath(ops.__file__))) != '$here')" 2>/dev/null; then
  "$app/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$here" >&2
fi
mkdir -p .ratchet
cat > .ratchet/env <<ENV
export RATCHET_APP_VENV="$app"
export RATCHET_VLLM_PYTHON="$vllm/bin/python"
export PATH="$app/bin:\$PATH"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MLFLOW_DISABLE_TELEMETRY=true GX_ANALYTICS_ENABLED=false
export DO_NOT_TRACK=1 VLLM_NO_USAGE_STATS=1 TOKENIZERS_PARALLELISM=false
ENV
. .ratchet/env
"$app/bin/ratchet" model prepare >/dev/null
# The broker binary leaves its wheel for ~/.calfkit/bin once, here (ops.stack.broker_bin also makes
# concurrent first resolves safe).
"$app/bin/python" -c "from ops.stack import broker_bin; broker_bin()"
echo "setup: ready in $((SECONDS - start))s (app venv $app, vLLM venv $vllm)" >&2
