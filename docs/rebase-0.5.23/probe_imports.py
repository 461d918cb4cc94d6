"""Import each 0.5.23 patch target module in a fresh interpreter and time it."""
import subprocess
import sys
import time

MODS = ["sglang.srt.plugins",
        "sglang.srt.mem_cache.unified_radix_cache",
        "sglang.srt.managers.tokenizer_manager",
        "sglang.srt.entrypoints.openai.serving_chat",
        "sglang.srt.entrypoints.openai.serving_completions",
        "sglang.srt.models.deepseek_v2",
        "sglang.srt.mem_cache.allocator.page_interleave",
        "sglang.srt.managers.hybrid_cache_controller" ,
        "sglang.srt.entrypoints.http_server"]
for m in MODS:
    t = time.time()
    r = subprocess.run([sys.executable, "-c", f"import {m}, sglang; print(sglang.__version__, {m}.__file__)"],
                       capture_output=True, text=True)
    dt = time.time() - t
    if r.returncode == 0:
        print(f"OK   {m:55s} {dt:5.1f}s  {r.stdout.strip().split()[0]}")
    else:
        last = [l for l in r.stderr.strip().splitlines() if l.strip()][-1:]
        print(f"FAIL {m:55s} {dt:5.1f}s  {last}")
