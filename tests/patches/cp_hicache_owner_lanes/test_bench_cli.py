"""The owner-lane benchmarks' command line on any release: the registry picks the adapter by release (one release
folder per sglang; none without sglang, or for a release no folder serves, refused in one line); ``--device cuda``
without a visible CUDA device fails with one clear line, no traceback, nothing written."""

from __future__ import annotations

import pytest

from tests.support.owner_lanes_bench import owner_lanes, run_bench


def test_the_registry_picks_the_adapter_by_release():
    lanes = owner_lanes()
    assert lanes.release_of("0.5.23").folder == "unified"
    with pytest.raises(SystemExit, match="drive cp-hicache-owner-lanes's release for the installed sglang: none"):
        lanes.release_of(None)
    with pytest.raises(SystemExit, match=r"no release folder of cp-hicache-owner-lanes serves sglang 0\.5\.22 "
                       r"\(folders: unified \(>=0\.5\.23\)\)"):  # fmt: skip
        lanes.release_of("0.5.22")
    adapter = lanes.adapter_for(lanes.release_of("0.5.23"))  # the one shape the drivers call (sglang: lazily)
    for name in ("TIMED_CALL", "UPSTREAM_PATH", "WORKLOAD", "N", "PS", "NOT_MEASURED", "CHART_CURVES", "prepare",
                 "bench_size", "release_detail", "report_detail"):  # fmt: skip
        assert hasattr(adapter, name), name


def test_bench_device_cuda_fails_clearly_without_cuda(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: --device cuda is expected to run here")
    proc = run_bench(tmp_path, "--quick", "--device", "cuda", "--json", str(tmp_path / "x.json"), timeout=120)
    assert proc.returncode != 0
    assert "--device cuda needs a visible CUDA device" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []
