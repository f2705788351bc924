#!/usr/bin/env bash
# The tests marked `slurm` against a real one-node Slurm cluster on this machine (tests/reasoning_rl/launch/test_slurm.py,
# ~4-6 min on 2 cores): installs Debian's slurm-wlm and munge, starts the cluster with scripts/local_slurm.sh in a
# folder of its own, runs `pytest -m slurm`, and stops the cluster on every way out (trap). An install that fails
# (no registry) is reported and the tests are skipped; failing tests fail CI.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python}

if ! command -v slurmctld >/dev/null 2>&1 && ! [ -x /usr/sbin/slurmctld ]; then
  if command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge) \
      || echo "warning: could not install slurm-wlm and munge" >&2
  fi
fi
if ! command -v slurmctld >/dev/null 2>&1 && ! [ -x /usr/sbin/slurmctld ]; then
  echo "warning: no Slurm here; the tests marked slurm did not run" >&2
  exit 0
fi

LOCAL_SLURM_DIR="$(mktemp -d "${TMPDIR:-/tmp}/reasoning-rl-ci-slurm.XXXXXX")"
rmdir "$LOCAL_SLURM_DIR"  # local_slurm.sh creates it
export LOCAL_SLURM_DIR
trap 'scripts/local_slurm.sh stop' EXIT
scripts/local_slurm.sh start || exit 1
export SLURM_CONF="$LOCAL_SLURM_DIR/slurm.conf"
"$python" -m pytest -m slurm -q -s -p no:cacheprovider tests/reasoning_rl/launch/test_slurm.py  # -s: the measured overhead per job
