#!/usr/bin/env bash
# Issue 35's GPU figures in one call on a lent GPU machine (docs/dev/platforms.md, "GPU figures"):
# the device, then rcsim's seconds per step of the particle flow (d = 3, RK4; n = 10^4 and 10^5;
# run.platform = cpu and opencl; float64 and float32), the forward workload (N = 128, d = 64,
# 1024 trials, measures at the first and last layer only, cpu and opencl), and PyTorch's same
# workloads where torch imports (bench/gpu_torch.py: its version and device). Every stage runs
# under `timeout`, and no stage starts after the budget (default 420 s) is spent: the whole
# script ends well inside the device tool's 10 minutes.
#
# Prepared here (bash ../shared/tools/device-bundle.sh .gpu build/sim/rcsim && tar -czf .gpu.tar.gz .gpu),
# run there with .gpu.tar.gz carried:
#   bash bench/gpu_figures.sh            (unpacks .gpu.tar.gz, sources .gpu/env.sh; rcsim from .gpu/bin)
#   bash bench/gpu_figures.sh --small    (small sizes: a few minutes on pocl, the CI-sized check)
# usage: gpu_figures.sh [--small] [--rcsim PATH] [--budget SECONDS] [--data DIR]
set -uo pipefail
small=0 rcsim="" budget=420 data=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --small) small=1 ;;
    --rcsim) rcsim=${2:?--rcsim needs a path}; shift ;;
    --budget) budget=${2:?--budget needs seconds}; shift ;;
    --data) data=${2:?--data needs a folder}; shift ;;
    *) echo "gpu_figures.sh: unknown argument '$1' (allowed: --small, --rcsim PATH, --budget SECONDS, --data DIR)" >&2
       exit 2 ;;
  esac
  shift
done
[[ $budget =~ ^[0-9]+$ ]] || { echo "gpu_figures.sh: --budget '$budget': want whole seconds" >&2; exit 2; }
bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)  # (not `here`: .gpu/env.sh sets that)
# The bundle: its libraries, the NVIDIA ICD registered. Carried whole (.gpu) or, since it is larger
# than the device tool's 64 MiB (OpenBLAS alone is 36 MB), as .gpu.tar.gz (about 27 MB).
if [[ ! -f .gpu/env.sh && -f .gpu.tar.gz ]]; then tar -xzf .gpu.tar.gz || { echo "gpu_figures.sh: cannot unpack .gpu.tar.gz" >&2; exit 1; }; fi
if [[ -f .gpu/env.sh ]]; then source .gpu/env.sh; fi
if [[ -z $rcsim ]]; then rcsim=$(command -v rcsim || echo build/sim/rcsim); fi
[[ -x $rcsim ]] || { echo "gpu_figures.sh: no rcsim at '$rcsim' (give --rcsim PATH)" >&2; exit 2; }
data=${data:-$(mktemp -d)}
mkdir -p "$data"
# Python: the first of python3 and /usr/bin/python3 that has h5py (token differences), and the first with torch.
pick() { for p in python3 /usr/bin/python3; do command -v "$p" >/dev/null && "$p" -c "import $1" 2>/dev/null && { command -v "$p"; return; }; done; }
py=$(pick h5py); py=${py:-$(command -v python3 || echo /usr/bin/python3)}
py_torch=$(pick torch)
end=$((SECONDS + budget))

# stage CAP CMD...: CMD under timeout min(CAP, what is left of the budget); a failure is printed, not fatal.
stage() {
  local cap=$1; shift
  local left=$((end - SECONDS))
  if ((left < 15)); then echo "# skipped (budget spent): $*"; return; fi
  ((cap > left)) && cap=$left
  local t0=$SECONDS
  timeout -k 5 "$cap" "$@"
  local rc=$?
  ((rc == 124 || rc == 137)) && echo "# timed out after ${cap} s: $*"
  ((rc != 0 && rc != 124 && rc != 137)) && echo "# failed (exit $rc): $*"
  echo "# stage: $((SECONDS - t0)) s"
}

echo "# gpu_figures.sh $(date -u +%FT%TZ) on $(cat /proc/sys/kernel/hostname 2>/dev/null): $(nproc) cores, budget ${budget} s, small=${small}"
"$rcsim" --version | head -1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
command -v clinfo >/dev/null && clinfo -l
# The device rcsim's opencl platform takes (its log line), and the root attributes a run records.
stage 60 "$rcsim" run --run.platform=opencl --model.tokens=64 --model.layers=2 --run.trials=2 \
  --output.file="$data/device.h5" --force 2>&1 | grep -i "opencl"
"$py" -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r'); print('# run file:', ', '.join(f'{k} = {f.attrs[k]}' for k in sorted(f.attrs) if k.startswith('opencl') or k.startswith('threads')))" "$data/device.h5" 2>/dev/null

if ((small)); then
  flow_sizes="1000:2,12:2 2000:2,6:1" fwd="--tokens 32 --dim 8 --trials 64 --steps 2,12 --reps 2"
else
  flow_sizes="10000:2,6:2 100000:1,2:1" fwd="--tokens 128 --dim 64 --trials 1024 --steps 2,8 --reps 2"
fi
for size in $flow_sizes; do
  IFS=: read -r n steps reps <<<"$size"
  for precision in float64 float32; do
    echo "## particle flow, n = $n, d = 3, RK4, $precision"
    stage 110 "$py" "$bench_dir/platforms.py" --rcsim "$rcsim" --platforms cpu,opencl --workload flow --tokens "$n" \
      --dim 3 --steps "$steps" --reps "$reps" --threads 0 --precision "$precision" --data "$data/flow"
  done
done
for precision in float64 float32; do
  echo "## forward ($fwd), post-LayerNorm, complete, measures at the first and last layer only, $precision"
  # shellcheck disable=SC2086  # $fwd is a list of options
  stage 90 "$py" "$bench_dir/platforms.py" --rcsim "$rcsim" --platforms cpu,opencl --workload forward $fwd \
    --threads 0 --precision "$precision" --data "$data/forward"
done
if [[ -n $py_torch ]]; then
  echo "## torch (bench/gpu_torch.py, $py_torch)"
  # shellcheck disable=SC2046  # --small or nothing
  stage 150 "$py_torch" "$bench_dir/gpu_torch.py" $( ((small)) && echo --small) --budget 100
else
  echo "## torch: not importable by python3 or /usr/bin/python3 (no comparison)"
fi
echo "# gpu_figures.sh done in ${SECONDS} s; run files in $data"
