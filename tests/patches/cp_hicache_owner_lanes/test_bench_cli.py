"""scripts/bench_owner_lanes.py's command line on any release: ``--device cuda`` without a visible CUDA
device fails with one clear line, no traceback, nothing written."""

from __future__ import annotations

import pytest

from tests.support.owner_lanes_bench import run_bench


def test_bench_device_cuda_fails_clearly_without_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: --device cuda is expected to run here")
    proc = run_bench(tmp_path, "--quick", "--device", "cuda", "--json", str(tmp_path / "x.json"), timeout=120)
    assert proc.returncode != 0
    assert "--device cuda needs a visible CUDA device" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []
