"""Probe of cluster-consistency: does upstream compare the loaded plugins across ranks itself?

Two fake ranks load different plugin sets (a throw-away dist in a temp dir, ``SGLANG_PLUGINS`` naming one each)
through upstream's own ``load_plugins()`` while a gloo default group lives on a ``HashStore``; the probe counts
the keys upstream adds to that rendezvous store, reads ``load_plugins``' signature (a rank or store parameter?)
and scans (``ast``) ``sglang.srt.plugins`` for torch.distributed and ``distributed/bootstrap.py`` for the plugin
framework. Invariant: upstream's plugin state (loaded flag, hook registry), ``sys.path``, the environment and the
default group are restored; files only in a temp dir; the overlay is never loaded (the whitelist names only the
fake plugins). Cost: one import of ``sglang.srt.plugins`` and torch.distributed (about 4 s), two loads, three
small source scans.
"""

from __future__ import annotations

import ast
import inspect
import os
import pkgutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from sglang_overlay.core.registry import CANNOT_TELL, FIXED_UPSTREAM, NEEDED, Finding

RANKS = ("overlay_probe_rank_a", "overlay_probe_rank_b")
DISTRIBUTED = {"torch.distributed", "all_gather", "all_gather_object", "broadcast_object_list", "_get_default_store",
               "TCPStore", "compare_set", "barrier"}  # fmt: skip
PLUGINS = {"sglang.srt.plugins", "load_plugins", "HookRegistry", "entry_points"}
_PLUGIN_MODULE = "RAN = []\n" + "".join(f"def {r}():\n    RAN.append({r!r})\n" for r in RANKS)


def decide(ran: list[list[str]], new_keys: list[str], crossings: list[str], scanned: int, params: list[str]) -> Finding:
    """The verdict from what was observed: each rank's executed plugins, store keys upstream added, crossings."""
    if ran != [[r] for r in RANKS]:
        return Finding(CANNOT_TELL, f"upstream's load_plugins() ran {ran}, not one different plugin per fake rank")
    params = [p for p in params if any(w in p for w in ("rank", "store", "group", "world"))]
    if new_keys or crossings or params:
        return Finding(FIXED_UPSTREAM, f"upstream's load_plugins() takes {params}, wrote store keys {new_keys[:4]}, "
                       f"links plugins with torch.distributed in {crossings[:4]}: re-read and drop the patch")  # fmt: skip
    return Finding(NEEDED, f"upstream's load_plugins() (no rank or store parameter) ran {RANKS[0]} on one rank and "
                   f"{RANKS[1]} on the other under a live gloo group: 0 keys added to its rendezvous store, and none "
                   f"of {scanned} modules (sglang.srt.plugins, distributed/bootstrap.py) links plugins with "
                   "torch.distributed: ranks with different plugins start unnoticed")  # fmt: skip


def _crossings(files: dict[str, tuple[Path, set[str]]]) -> tuple[list[str], int]:
    """``module: name`` for each forbidden name in each existing module's imports, names and attributes."""
    found, scanned = [], 0
    for module, (path, wanted) in files.items():
        if not path.is_file():
            continue
        scanned += 1
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            names += [getattr(node, "module", None) or "", getattr(node, "id", ""), getattr(node, "attr", "")]
            found += [f"{module}: {n}" for n in names if n in wanted]
    return sorted(set(found)), scanned


def probe() -> Finding:
    import sglang.srt.plugins as plugins
    import torch.distributed as dist
    from sglang.srt.plugins.hook_registry import HookRegistry

    srt = Path(plugins.__file__).parent.parent
    files = {f"sglang.srt.plugins.{m.name}": (srt / "plugins" / f"{m.name}.py", DISTRIBUTED)
             for m in pkgutil.iter_modules(plugins.__path__)}  # fmt: skip
    files["sglang.srt.plugins"] = (Path(plugins.__file__), DISTRIBUTED)
    files["sglang.srt.distributed.bootstrap"] = (srt / "distributed" / "bootstrap.py", PLUGINS)
    crossings, scanned = _crossings(files)
    params = list(inspect.signature(plugins.load_plugins).parameters)
    saved = (plugins._plugins_loaded, HookRegistry._hooks, HookRegistry._patched, os.environ.get("SGLANG_PLUGINS"))
    own_group = not dist.is_initialized()
    store = dist.HashStore() if own_group else dist.distributed_c10d._get_default_store()
    if own_group:
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    tmp = None
    try:
        with tempfile.TemporaryDirectory(prefix="overlay-probe-") as tmp:
            info = Path(tmp) / "overlay_probe_ranks-0.dist-info"
            info.mkdir()
            (info / "METADATA").write_text("Metadata-Version: 2.1\nName: overlay-probe-ranks\nVersion: 0\n")
            eps = "".join(f"{r} = overlay_probe_ranks:{r}\n" for r in RANKS)
            (info / "entry_points.txt").write_text(f"[{plugins.GENERAL_PLUGINS_GROUP}]\n{eps}")
            (Path(tmp) / "overlay_probe_ranks.py").write_text(_PLUGIN_MODULE)
            sys.path.insert(0, tmp)
            before, ran = set(store.list_keys()), []
            HookRegistry._hooks, HookRegistry._patched = defaultdict(list), set()
            for rank in RANKS:  # each fake rank: its own plugin set, the one store
                os.environ["SGLANG_PLUGINS"], plugins._plugins_loaded = rank, False
                plugins.load_plugins()
                record = sys.modules.pop("overlay_probe_ranks", None)  # the next rank imports it afresh
                ran.append(record.RAN if record else [])
            new_keys = sorted(set(store.list_keys()) - before)
    finally:
        plugins._plugins_loaded, HookRegistry._hooks, HookRegistry._patched, env = saved
        os.environ.pop("SGLANG_PLUGINS", None)
        if env is not None:
            os.environ["SGLANG_PLUGINS"] = env
        sys.path[:] = [p for p in sys.path if p != tmp]
        sys.modules.pop("overlay_probe_ranks", None)
        if own_group:
            dist.destroy_process_group()
    return decide(ran, new_keys, crossings, scanned, params)
