#!/usr/bin/env bash
# The numerically sensitive tests (`pytest -m numerics`: the policy runtime, log-probs, the LM head, losses,
# resume, the cross-checks) again under every other CPU capability torch offers on this machine. The main
# suite ran on the CPU's own (the best torch finds: AVX512 or AVX2 on x86); ATEN_CPU_CAPABILITY forces a
# lower one, so one CI machine also sees the kernels of older CPUs (tests/conftest.py: rounding_atol is the
# one rule their tolerances follow). A failure names the capability; all capabilities run before CI fails.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python}
native=$("$python" -c "import torch; print(torch.backends.cpu.get_cpu_capability())")
failed=()
for cap in default avx2 avx512; do
  got=$(ATEN_CPU_CAPABILITY=$cap "$python" -c "import torch; print(torch.backends.cpu.get_cpu_capability())")
  if [ "$got" != "${cap^^}" ]; then
    echo "numerics: ATEN_CPU_CAPABILITY=$cap is not offered by this CPU (torch runs $got); skipped"
    continue
  fi
  if [ "$got" = "$native" ]; then
    echo "numerics: $cap is this CPU's own capability; the main suite ran these tests under it"
    continue
  fi
  echo "numerics: pytest -m numerics under ATEN_CPU_CAPABILITY=$cap"
  if ! ATEN_CPU_CAPABILITY=$cap "$python" -m pytest -m numerics -q -p no:cacheprovider; then
    echo "numerics: FAILED under ATEN_CPU_CAPABILITY=$cap" >&2
    failed+=("$cap")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "numerics: the numerically sensitive tests failed under CPU capability: ${failed[*]}" >&2
  exit 1
fi
