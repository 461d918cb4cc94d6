#!/usr/bin/env python
"""The carry of the GPU check: what a Python 3.12 + torch host needs to import the check's sglang code.

The device machine (see the README's "GPU check") has Python 3.12, torch and a fixed image of packages, no
sglang and no network, and takes at most 64 MiB of files per call. This script builds, from the default
pin's environment (``.venv``), the folder ``.gpu_carry/`` (git-ignored; name it in the device tool's ``carry``):

- ``sglang-src.tar.gz``: sglang's own sources the check can reach: the static import closure (every
  ``import sglang...`` in any branch, CUDA's included) of the sglang modules that the check's files name
  (the benchmarks, ``tests/support``'s builders, the overlay), each file as the pin's wheel installed it,
  with sglang's dist-info (the overlay reads the installed version from it) and the JIT kernels' C++/CUDA
  sources (``sglang/kernels/jit/include``, ``csrc``: upstream's JIT loader requires them at import and
  compiles from them on CUDA). No compiled file: the wheel's Rust extensions are cp311 builds and nothing on
  the check's path imports them.
- ``pure.tar.gz``: the pure-Python distributions the check imports that the device's image lacks,
  whole (their files as installed here).
- ``wheels/``: the cp312 wheels of the compiled distributions the check imports that the image lacks
  (``pip download``, the versions installed here).
- ``manifest.json``: what is in it and why. ``scripts/gpu_check.sh`` unpacks it into a folder on ``PYTHONPATH``.

Stand-ins: only ``sgl_kernel`` (``tests/support/real_server/standins/sgl_kernel``), the one CUDA build the
device lacks that sglang imports at module level; it travels with the checkout, and ``gpu_check.sh`` puts
its folder on the path. The distributions the device's image has (``DEVICE_IMAGE``, read off KINDS.md of
the device tool on 2026-11-17) are used as the device has them, never carried.

Invariant: the carry plus the checkout stay under 64 MiB (the script fails otherwise).
Cost: one traced interpreter (imports only, about 30 s), one ``pip download`` per compiled distribution.

    .venv/bin/python scripts/gpu_carry.py            # builds .gpu_carry/ (prints sizes)
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import files, packages_distributions, version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LIMIT = 64 * 2**20
# the device's image (device tool's KINDS.md, 'Python packages already there', read 2026-11-17), normalized
DEVICE_IMAGE = frozenset(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
    certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
    cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
    flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
    huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jaxlib jaxtyping jinja2
    joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
    markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
    multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
    onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
    propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
    pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
    pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
    scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
    sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl
    tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
    torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop
    wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp""".split()
)
# the project files whose sglang imports the check reaches (their closure is carried)
CHECK_FILES = (
    "scripts/bench_moe_compaction.py",
    "scripts/moe_compaction/boundary.py",
    "scripts/moe_compaction/full.py",
    "scripts/bench_owner_lanes.py",
    "scripts/bench_capacity.py",
    "scripts/owner_lanes/unified.py",
    "scripts/owner_lanes/unified_trees.py",
    "tests/support/moe_standins.py",
    "tests/patches/moe_cp_compaction/forward_context/standins.py",
    "tests/patches/cp_hicache_owner_lanes/unified/hicache_cpu.py",
    "tests/patches/cp_hicache_owner_lanes/unified/hicache_cpu_standins.py",
    "tests/support/hicache_tensor_count.py",
    "tests/support/runtime.py",
)
# what the traced interpreter imports: the modules of the check's steps (third-party needs are read off it)
TRACE_IMPORTS = (
    "tests.patches.moe_cp_compaction.forward_context.standins",
    "tests.patches.cp_hicache_owner_lanes.unified.hicache_cpu",
    "sglang.srt.models.deepseek_v2",
    "sglang.srt.mem_cache.unified_radix_cache",
    "sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler",
    "sglang.srt.mem_cache.pool_host.mha",
    "sglang.srt.mem_cache.page_interleave_pool",
    "sglang.srt.eplb.expert_location",
    "sglang.srt.model_executor.forward_context",
    "sglang_overlay.patches.cp_hicache_owner_lanes.unified.gate",
    "sglang_overlay.patches.cp_hicache_owner_lanes.unified.capacity",
    "sglang_overlay.patches.moe_cp_compaction.forward_context",
)
_TRACE = """
import json, os, re, sys
cuda = os.environ.get("GPU_CARRY_AS_CUDA_HOST")
if cuda:  # what the device's imports take: sglang's CUDA branches
    import torch
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_device_capability = lambda device=None: (9, 0)  # the H200's
    torch.cuda.get_device_name = lambda device=None: "a CUDA host, as the carry's trace pretends"
    torch.version.cuda = "13.0"
for name in sys.argv[2:]:
    __import__(name)
json.dump({n: getattr(m, "__file__", None) for n, m in list(sys.modules.items())}, open(sys.argv[1], "w"))
if cuda:  # every module of the closure (lazy imports included): does the sgl_kernel stand-in answer it?
    import importlib
    bad = []
    for name in open(cuda).read().split():
        try:
            importlib.import_module(name)
        except BaseException as e:  # other failures (optional packages) are the device's too, and not the stand-in's
            if re.search(r"'sgl_kernel(\\.\\w+)*'", str(e)):
                bad.append(f"{name}: {type(e).__name__}: {e}")
    if bad:
        sys.exit("the sgl_kernel stand-in does not answer what these modules import on a CUDA host:\\n" + "\\n".join(bad))
"""
PLATFORMS = tuple(f"manylinux{tag}_x86_64" for tag in ("_2_28", "_2_17", "2014", "_2_5", "1"))  # pip download's
STAND_IN = REPO / "tests" / "support" / "real_server" / "standins" / "sgl_kernel"


def norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def module_imports(name: str, path: Path):
    """Every module name an import statement of ``path`` (module ``name``) names, in any branch."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)


def sglang_closure(site: Path, roots, known: dict | None = None) -> dict:
    """{module: file} of the sglang modules reachable from ``roots`` through import statements (``known``: a
    closure already walked, extended rather than walked again)."""
    seen, stack = dict(known or {}), list(roots)
    while stack:
        parts = stack.pop().split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if name in seen or parts[0] != "sglang":
                continue
            base = site / name.replace(".", "/")
            path = base / "__init__.py" if (base / "__init__.py").is_file() else base.with_suffix(".py")
            if not path.is_file():
                continue
            seen[name] = path
            stack.extend(m for m in module_imports(name, path) if m.split(".")[0] == "sglang")
    return seen


def project_roots() -> set:
    roots = set()
    files = [REPO / f for f in CHECK_FILES] + sorted((REPO / "sglang_overlay").rglob("*.py"))
    for path in files:
        rel = path.relative_to(REPO).with_suffix("")
        roots.update(m for m in module_imports(".".join(rel.parts), path) if m.split(".")[0] == "sglang")
    return roots


def trace(python: str, tmp: Path, closure) -> dict:
    """{module: file} of child interpreters of the environment after importing TRACE_IMPORTS: one as this host
    is, one as a CUDA host (torch told CUDA is there, the ``sgl_kernel`` stand-in on the path, as on the
    device), which takes sglang's CUDA branches and then imports every module of ``closure`` (the check's
    lazy imports included). An import of sgl_kernel that would fail on the device fails here, named."""
    modules = {}
    shutil.copytree(STAND_IN, tmp / "standin" / "sgl_kernel")
    (tmp / "closure.txt").write_text("\n".join(sorted(closure)))
    for name, extra in (("cpu", {}), ("cuda", {"GPU_CARRY_AS_CUDA_HOST": str(tmp / "closure.txt")})):
        out = tmp / f"trace-{name}.json"
        path = str(REPO) if not extra else f"{REPO}:{tmp / 'standin'}"
        proc = subprocess.run([python, "-c", _TRACE, str(out), *TRACE_IMPORTS], cwd=REPO, capture_output=True,
                              text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": path,
                                              **extra})  # fmt: skip
        if proc.returncode != 0:
            raise SystemExit(
                f"the check's modules do not import as a {name} host would see them:\n{proc.stderr[-4000:]}"
            )
        modules.update(json.loads(out.read_text()))
    return modules


def third_party(site: Path, traced: dict) -> dict:
    """{distribution: [its top-level names]} the trace imported from ``site``, sglang and the image's left out."""
    dists = packages_distributions()
    needed: dict = {}
    for file in _site_files(site, traced):
        top = file.relative_to(site).parts[0].split(".")[0]
        for dist in dists.get(top, ()):
            if norm(dist) not in DEVICE_IMAGE | {"sglang"}:
                needed.setdefault(dist, set()).add(top)
    return {d: sorted(t) for d, t in sorted(needed.items())}


def is_compiled(dist: str) -> bool:
    return any(str(f).endswith((".so", ".pyd")) for f in files(dist) or ())


def add_dist_files(tar: tarfile.TarFile, site: Path, dist: str) -> None:
    for f in files(dist) or ():
        path = site / f
        if path.is_file() and "__pycache__" not in f.parts and path.resolve().is_relative_to(site):
            tar.add(path, arcname=str(f))


def build(out: Path, python: str) -> dict:
    import sglang

    site = Path(sglang.__file__).resolve().parent.parent
    if out.exists():
        shutil.rmtree(out)
    (out / "wheels").mkdir(parents=True)
    static = sglang_closure(site, project_roots() | {m for m in TRACE_IMPORTS if m.split(".")[0] == "sglang"})
    with tempfile.TemporaryDirectory() as tmp:
        traced = trace(python, Path(tmp), static)
    closure = sglang_closure(site, [m for m in traced if m.split(".")[0] == "sglang"], static)  # each file parsed once
    with tarfile.open(out / "sglang-src.tar.gz", "w:gz") as tar:
        for path in sorted(set(closure.values())):
            tar.add(path, arcname=str(path.relative_to(site)))
        for path in sorted((site / "sglang" / "kernels" / "jit").glob("[ic]*/**/*")):  # include/, csrc/: JIT sources
            if path.is_file() and path.suffix not in (".pyc", ".py"):
                tar.add(path, arcname=str(path.relative_to(site)))
        for info in site.glob("sglang-*.dist-info"):
            tar.add(info, arcname=info.name, filter=lambda t: None if "RECORD" in t.name else t)
    needed = third_party(site, traced)
    compiled = {d: t for d, t in needed.items() if is_compiled(d)}
    pure = {d: t for d, t in needed.items() if d not in compiled}
    with tarfile.open(out / "pure.tar.gz", "w:gz") as tar:
        for dist in pure:
            add_dist_files(tar, site, dist)
    pins = [f"{d}=={version(d)}" for d in compiled]
    if pins:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.12", "--implementation", "cp", *(a for p in PLATFORMS for a in ("--platform", p)),
                        "-d", str(out / "wheels"), *pins], check=True)  # fmt: skip
    manifest = dict(
        sglang=version("sglang"),
        sglang_modules=len(closure),
        pure=pure,
        compiled=pins,
        stand_ins={"sgl_kernel": "tests/support/real_server/standins/sgl_kernel (sglang-kernel: CUDA build, absent)"},
        device_image_used=sorted({norm(d) for d in _dists_of(site, traced)} & DEVICE_IMAGE),
    )
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def _dists_of(site: Path, traced: dict):
    dists = packages_distributions()
    for file in _site_files(site, traced):
        yield from dists.get(file.relative_to(site).parts[0].split(".")[0], ())


def _site_files(site: Path, traced: dict):
    for file in traced.values():
        if file and Path(file).resolve().is_relative_to(site):
            yield Path(file).resolve()


def tree_size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / ".gpu_carry", help="the carry folder (default .gpu_carry)")
    ap.add_argument("--python", default=sys.executable, help="the default pin's interpreter (default: this one)")
    args = ap.parse_args(argv)
    manifest = build(args.out, args.python)
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    checkout = sum((REPO / f).stat().st_size for f in tracked.decode().split("\0") if f and (REPO / f).is_file())
    carry = tree_size(args.out)
    print(f"sglang {manifest['sglang']}: {manifest['sglang_modules']} modules; pure: {', '.join(manifest['pure'])}")
    print(f"wheels: {', '.join(manifest['compiled'])}; stand-ins: {', '.join(manifest['stand_ins'])}")
    print(f"carry {carry / 2**20:.1f} MiB + checkout {checkout / 2**20:.1f} MiB (limit {LIMIT / 2**20:.0f} MiB)")
    if carry + checkout > LIMIT:
        print("too large for the device tool's 64 MiB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
