#!/usr/bin/env bash
# The prepared GPU check on the default pin (sglang 0.5.23): one command, a few minutes on one H200
# (Python 3.12 + torch there, no sglang, no network), results as JSON under $OUT.
#
#   scripts/gpu_check.sh                  # on the device: CUDA, bf16, DeepSeek-V3 sizes
#   scripts/gpu_check.sh --device cpu     # the same steps on the CPU at small sizes (CI's rehearsal)
#   GPU_CHECK_STEPS="moe_full" scripts/gpu_check.sh   # only the steps named (a rerun inside the device budget)
#
# sglang comes from the carry ($GPU_CARRY, default .gpu_carry/, built here by `.venv/bin/python scripts/gpu_carry.py`), unpacked
# into $CARRY_SITE and put first on PYTHONPATH with the one stand-in the device lacks (sgl_kernel); where
# sglang already imports (a GPU host with sglang), the carry is not used.
# 1. moe_boundary: moe-cp-compaction's boundary alone (layout index, gather, zero-filled scatter) at
#    12/25/50% dummy rows, under torch.cuda.set_sync_debug_mode("error") (torch only).
# 2. moe_full: upstream's whole DeepseekV2MoE of 0.5.23 (DeepEP stand-ins; 256 experts x inter 2048, hidden
#    7168, bf16) padded against the pin's hook: net speedup at 0/12/25/50% dummy rows, the hook under the
#    same sync mode.
# 3. owner_lanes_<leaves>: scripts/bench_owner_lanes.py, whose registry-chosen adapter on 0.5.23 is unified's:
#    UnifiedRadixCache._load_back_transfers hooked against upstream's with the KV pool and indices on the
#    device, at 10k and then 100k evictable leaves (one run each, so the first size's figures survive a
#    second that runs out of time): success, pages evicted, time per call, tensor ops and host syncs while
#    planning (planning under set_sync_debug_mode("error") on CUDA). Building a 100k-leaf tree is upstream's
#    Python, per side: about 2 minutes on the 2-core CPU machine.
# Each step writes $OUT/<step>.json and appends its output to $OUT/steps.log; a failed step does not stop the
# others; the exit status is 1 when any failed. Six files under $OUT (the device tool takes at most 8).
set -u
cd "$(dirname "$0")/.."
DEVICE=cuda
[ "${1:-}" = "--device" ] && DEVICE="${2:?--device cpu|cuda}"
OUT="${OUT:-out/gpu_check}"
PY="${PYTHON:-python3}"
CARRY="${GPU_CARRY:-.gpu_carry}"
CARRY_SITE="${CARRY_SITE:-/tmp/gpu_carry_site}"
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
if ! "$PY" -c "import sglang.srt" >/dev/null 2>&1; then
    if [ ! -f "$CARRY/manifest.json" ]; then
        echo "sglang does not import here and there is no carry in $CARRY (build it: .venv/bin/python scripts/gpu_carry.py)"
        exit 2
    fi
    rm -rf "$CARRY_SITE" && mkdir -p "$CARRY_SITE"
    tar xzf "$CARRY/sglang-src.tar.gz" -C "$CARRY_SITE" && tar xzf "$CARRY/pure.tar.gz" -C "$CARRY_SITE" || exit 2
    if ls "$CARRY"/wheels/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$CARRY_SITE" \
            "$CARRY"/wheels/*.whl || exit 2
    fi
    cp -r tests/support/real_server/standins/sgl_kernel "$CARRY_SITE/"  # STAND-IN: sglang-kernel is a CUDA build
    export PYTHONPATH="$CARRY_SITE"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
failed=0

step() {  # step NAME TIMEOUT_S COMMAND...
    local name=$1 limit=$2
    shift 2
    case " ${GPU_CHECK_STEPS:-$name} " in *" $name "*) ;; *) echo "== $name: skipped (GPU_CHECK_STEPS)"; return ;; esac
    local t0=$SECONDS log="$OUT/step.tmp"
    echo "== $name: $*"
    if timeout "$limit" "$@" >"$log" 2>&1; then
        echo "   ok ($(( SECONDS - t0 )) s)"
    else
        echo "   FAILED (exit $?, $(( SECONDS - t0 )) s); the end of its log:"
        tail -n 25 "$log"
        failed=1
    fi
    { echo "== $name ($(( SECONDS - t0 )) s): $*"; cat "$log"; } >>"$OUT/steps.log"
    rm -f "$log"
}

"$PY" - >"$OUT/env.txt" 2>&1 <<'PY'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
print("device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
import sglang
print("sglang", sglang.__version__, "from", sglang.__file__)
PY
cat "$OUT/env.txt"

if [ "$DEVICE" = cuda ]; then
    MOE=(--device cuda --dtype bf16 --hidden 7168 --experts 256 --top-k 8 --inter 2048 --rows 4096 --repeats 5)
    LANES=(--device cuda --loads 4)
    LEAVES=(10000 100000)
else  # the same steps, sizes a loaded 2-core machine runs in about a minute
    MOE=(--device cpu --dtype bf16 --hidden 64 --experts 16 --top-k 4 --inter 16 --rows 256 --repeats 1)
    LANES=(--device cpu --loads 2)
    LEAVES=(1000)
fi
step moe_boundary 90 "$PY" scripts/bench_moe_compaction.py --boundary-only "${MOE[@]}" --json "$OUT/moe_boundary.json"
# exit 1 with its JSON written means "compact path not faster at 25/50%": a figure, reported in the JSON;
# without the JSON it is a failure (an exception exits 1 too)
rm -f "$OUT/moe_full.json"
step moe_full 240 bash -c '"$0" scripts/bench_moe_compaction.py "$@"; [ $? -le 1 ] && [ -s "${@: -1}" ]' \
    "$PY" "${MOE[@]}" --json "$OUT/moe_full.json"
for leaves in "${LEAVES[@]}"; do
    step "owner_lanes_$leaves" 330 "$PY" scripts/bench_owner_lanes.py "${LANES[@]}" --sizes "$leaves" \
        --json "$OUT/owner_lanes_$leaves.json"
done
exit "$failed"
