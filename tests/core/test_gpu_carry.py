"""The GPU check's carry (scripts/gpu_carry.py) and its one command (scripts/gpu_check.sh), on this host.

The whole carry is rehearsed in CI (nox ``wheel``: a clean Python 3.12 environment, ``gpu_check.sh --device
cpu``); these tests pin the parts that decide what travels: the import closure follows sglang's CUDA branches
(which a CPU trace never takes), the device's image is never carried, and the command refuses clearly where
sglang neither imports nor travels.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.env import REPO


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def site() -> Path:
    import sglang

    return Path(sglang.__file__).resolve().parent.parent


@pytest.mark.ci_slow  # parses about 2,000 of sglang's files
def test_closure_takes_the_cuda_branch_a_cpu_trace_never_imports():
    """deepseek_v2 imports tiny_gemm only under ``if _is_cuda:``: it travels all the same."""
    carry = load("gpu_carry")
    closure = carry.sglang_closure(site(), ["sglang.srt.models.deepseek_v2"])
    assert "sglang.kernels.ops.gemm.tiny_gemm" in closure
    assert closure["sglang"].name == "__init__.py"  # a package's __init__ travels with its modules
    assert all(p.suffix == ".py" for p in closure.values())


def test_relative_imports_resolve_against_their_package(tmp_path):
    carry = load("gpu_carry")
    pkg = tmp_path / "sglang" / "a"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import b\nfrom ..c import d\n")
    names = set(carry.module_imports("sglang.a", pkg / "__init__.py"))
    assert {"sglang.a.b", "sglang.c", "sglang.c.d"} <= names


def test_the_device_image_is_never_carried():
    """Only what the device lacks travels: a traced numpy or transformers is the image's own."""
    carry = load("gpu_carry")
    sp = site()
    traced = {
        "numpy": str(sp / "numpy" / "__init__.py"),
        "transformers": str(sp / "transformers" / "__init__.py"),
        "pydantic": str(sp / "pydantic" / "__init__.py"),
    }
    assert list(carry.third_party(sp, traced)) == ["pydantic"]


@pytest.mark.ci_slow
def test_gpu_check_refuses_clearly_without_sglang_or_carry(tmp_path):
    """An interpreter where sglang does not import, and no carry: exit 2 with what to build, nothing run."""
    env = {"PATH": "/usr/bin:/bin", "PYTHON": "/usr/bin/python3", "GPU_CARRY": str(tmp_path / "none"),
           "OUT": str(tmp_path / "out")}  # fmt: skip
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--device", "cpu"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "scripts/gpu_carry.py" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr
    assert list((tmp_path / "out").iterdir()) == []


_STAND_IN_FACES = """
import sys, torch
if sys.argv[1] == "cuda":  # as the carry's trace pretends, and as the device is
    torch.cuda.is_available = lambda: True
    torch.version.cuda = "13.0"
import sgl_kernel
faces = []
for name in ("sgl_kernel.top_k_renorm_prob", "sgl_kernel.kvcacheio.transfer_kv_direct", "sgl_kernel.scalar_type.ScalarType"):
    module, _, attr = name.rpartition(".")
    try:
        exec(f"from {module} import {attr} as fn")  # as upstream imports them
    except ImportError:
        faces.append(f"{name}: absent")
        continue
    try:
        fn()
    except NotImplementedError as e:
        faces.append(f"{name}: import-only ({e})")
print("\\n".join(faces))
"""


@pytest.mark.parametrize("host", ["cpu", "cuda"])
def test_the_sgl_kernel_stand_in_answers_cuda_imports_on_a_cuda_host_only(tmp_path, host):
    """On the device sglang's CUDA branches import kernels by the dozen (the first device run stopped at
    ``top_k_renorm_prob``): there they import and fail loudly when called. On a CPU host (the real-server tier)
    they stay absent, so upstream's CPU paths and ImportError fallbacks are unchanged; ``scalar_type`` is
    absent on both, so upstream's own mock table is used."""
    stand_in = REPO / "tests" / "support" / "real_server" / "standins"
    (tmp_path / "sgl_kernel").symlink_to(stand_in / "sgl_kernel")  # the package alone, as gpu_check.sh copies it
    proc = subprocess.run([sys.executable, "-c", _STAND_IN_FACES, host], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    faces = proc.stdout.splitlines()
    if host == "cpu":
        assert faces[:2] == ["sgl_kernel.top_k_renorm_prob: absent", "sgl_kernel.kvcacheio.transfer_kv_direct: absent"]
    else:
        assert faces[0].startswith("sgl_kernel.top_k_renorm_prob: import-only (sgl_kernel.top_k_renorm_prob:")
        assert faces[1].startswith("sgl_kernel.kvcacheio.transfer_kv_direct: import-only (sgl_kernel.kvcacheio.")
    assert faces[2] == "sgl_kernel.scalar_type.ScalarType: absent"
