"""Step 3b: does the overlay's hooking machinery (HookRegistry via load_plugins) work on 0.5.23 once the
lock is regenerated? Writes a 0.5.23 lock for the two patches whose targets still exist (cp-hicache-owner-lanes
cannot be locked: its HiRadixCache/RadixCache targets are gone) to /tmp/r13-upstream-0.5.23.lock, then a
fresh interpreter runs load_plugins() with SGLANG_OVERLAY_LOCK pointing there and the cp patch disabled."""
import os
import subprocess
import sys
from pathlib import Path

from sglang_overlay.core import fingerprint, lockfile
from sglang_overlay.core.registry import discover_patches

LOCK = Path("/tmp/r13-upstream-0.5.23.lock")
WHEEL = Path("/work/r13/wheels/sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl")
cur = lockfile.read_lock()
pin = lockfile.Pin(**{**cur["upstream"], "version": "0.5.23", "wheel": WHEEL.name,
                      "wheel_sha256": lockfile.sha256_file(WHEEL), "torch": "2.14.1", "torchvision": "0.29.1"})
patches = [p for p in discover_patches() if p.id != "cp-hicache-owner-lanes" and not p.extra]
data = lockfile.build_lock(patches, pin, fingerprint.fingerprint_installed, fingerprint.installed_file_digest)
lockfile.write_lock(data, LOCK)
print("wrote", LOCK, "targets:", sorted(data["targets"]))

child = r'''
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s: %(message)s")
from sglang.srt.plugins import load_plugins
load_plugins()
import sglang.srt.managers.tokenizer_manager as tm
import sglang.srt.entrypoints.openai.serving_chat as sc
import sglang.srt.entrypoints.openai.serving_completions as scp
import sglang.srt.models.deepseek_v2 as dv
for owner, name in [(tm.TokenizerManager, "_handle_abort_finish_reason"),
                    (sc.OpenAIServingChat, "_handle_streaming_request"),
                    (scp.OpenAIServingCompletion, "_handle_streaming_request"),
                    (dv.DeepseekV2MoE, "forward_deepep"), (dv.DeepseekV2MoE, "__init__"), (dv.DeepseekV2MoE, "op_gate")]:
    f = owner.__dict__[name]
    print(f"{owner.__name__}.{name}: wrapped={hasattr(f, '__wrapped__')} module={getattr(f, '__module__', '?')}")
'''
env = dict(os.environ, SGLANG_OVERLAY_LOCK=str(LOCK), SGLANG_OVERLAY_DISABLE="cp-hicache-owner-lanes")
env.pop("SGLANG_OVERLAY_ALLOW_UNPINNED", None)
r = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True)
print("child rc", r.returncode)
print("\n".join(l for l in r.stdout.splitlines()))
print("\n".join(l for l in r.stderr.splitlines() if "Warning" not in l and "warnings.warn" not in l)[-3000:])
