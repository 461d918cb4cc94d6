"""The CPU stand-ins the real servers run with do what the kernels they replace do (no server needed)."""

from __future__ import annotations

import importlib.util
import sys
from importlib.metadata import entry_points

import pytest
import torch

from tests.support.real_server.server import STANDINS

pytestmark = pytest.mark.e2e


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_standin_{name}", STANDINS / name / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_assign_req_to_token_pool_writes_each_requests_slice():
    kernel = _load("sgl_kernel")
    req_to_token = torch.zeros((4, 10), dtype=torch.int32)
    rows, starts, ends = torch.tensor([2, 0]), torch.tensor([3, 0]), torch.tensor([6, 2])
    out_cache_loc = torch.tensor([11, 12, 13, 21, 22])
    kernel.assign_req_to_token_pool_cpu(rows, req_to_token, starts, ends, out_cache_loc, 10)
    assert req_to_token[2, 3:6].tolist() == [11, 12, 13] and req_to_token[0, 0:2].tolist() == [21, 22]
    assert int(req_to_token.count_nonzero()) == 5


def test_other_kernel_names_exist_and_refuse_to_run():
    kernel = _load("sgl_kernel")
    for name in kernel.IMPORT_ONLY:
        with pytest.raises(NotImplementedError, match="stand-in"):
            getattr(kernel, name)()


def test_transfer_kv_direct_copies_whole_pages_of_every_layer():
    standins = _load("sglang_cpu_standins")
    src = [torch.arange(64, dtype=torch.float32).view(16, 4) + 100 * layer for layer in range(2)]
    dst = [torch.zeros(32, 4) for _ in range(2)]
    src_idx = torch.tensor([4, 5, 6, 7, 12, 13, 14, 15])
    dst_idx = torch.tensor([24, 25, 26, 27, 0, 1, 2, 3])
    standins.transfer_kv_direct(src, dst, src_idx, dst_idx, page_size=4)
    for s, d in zip(src, dst):
        assert torch.equal(d[dst_idx], s[src_idx])
        assert int((d != 0).any(dim=1).sum()) == 8  # nothing outside the two pages was written
    assert standins.STATS["pages_copied"] == 4
    with pytest.raises(ValueError, match="page-aligned"):
        standins.transfer_kv_direct(src, dst, torch.tensor([1, 2, 3, 4]), torch.tensor([0, 1, 2, 3]), page_size=4)


def test_the_standin_plugin_is_found_through_its_entry_point(monkeypatch):
    monkeypatch.syspath_prepend(str(STANDINS))
    import importlib

    importlib.invalidate_caches()
    names = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    assert names.get("cpu_standins") == "sglang_cpu_standins:load"
    assert "sgl_kernel" not in sys.modules or "standin" in getattr(sys.modules["sgl_kernel"], "__version__", "")
