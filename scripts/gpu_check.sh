#!/usr/bin/env bash
# One short, prepared GPU check (a few minutes on one H200; python 3.12 + torch there, no network).
#
#   scripts/gpu_check.sh            # writes under $OUT (default: out/gpu_check)
#
# 1. moe-cp-compaction on CUDA, bf16, hidden 7168: the boundary's own steps (a new layout's
#    pinned, non_blocking device index; per layer one gather and one zero-filled scatter) timed
#    for 12/25/50% dummy rows on 4096 rows, and run under torch.cuda.set_sync_debug_mode("error"),
#    which raises on any host sync (scripts/bench_moe_compaction.py --boundary-only: needs torch only).
# 2. Where sglang imports on that host, the full MoE benchmark as well (upstream DeepseekV2MoE with
#    the DeepEP stand-ins, 256 experts x inter 2048, --quick), its hook under the same sync mode.
# 3. scripts/bench_owner_lanes.py --device cuda --quick (needs sglang: reported as failed otherwise).
# Each step's output goes to $OUT/<step>.log, its results to $OUT/<step>.json; a failed step does
# not stop the others; the exit status is 1 when any step failed. At most 7 files are written.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu_check}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
failed=0

step() {  # step NAME TIMEOUT_S COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "== $name: $*"
    if timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; then
        echo "   ok"
    else
        echo "   FAILED (exit $?); the end of $OUT/$name.log:"
        tail -n 25 "$OUT/$name.log"
        failed=1
    fi
}

"$PY" - >"$OUT/env.txt" 2>&1 <<'PY'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
print("device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
try:
    import sglang
    print("sglang", sglang.__version__)
except Exception as exc:
    print("sglang not importable:", type(exc).__name__, exc)
PY
cat "$OUT/env.txt"

step moe_boundary 240 "$PY" scripts/bench_moe_compaction.py --boundary-only --device cuda --dtype bf16 \
    --hidden 7168 --rows 4096 --repeats 5 --json "$OUT/moe_boundary.json"
if "$PY" -c "import sglang.srt.models.deepseek_v2" >/dev/null 2>&1; then
    step moe_full 300 "$PY" scripts/bench_moe_compaction.py --quick --device cuda --dtype bf16 \
        --hidden 7168 --inter 2048 --json "$OUT/moe_full.json"
else
    echo "== moe_full: skipped (sglang.srt.models.deepseek_v2 does not import here; see $OUT/env.txt)"
fi
step owner_lanes 300 "$PY" scripts/bench_owner_lanes.py --device cuda --quick --json "$OUT/owner_lanes.json"
exit "$failed"
