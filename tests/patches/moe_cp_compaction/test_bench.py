"""The MoE compaction benchmark runs with the shared flags (--quick, --json, --png); the full run is ci_slow."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.env import REPO, subprocess_env


@pytest.mark.ci_slow
def test_bench_moe_compaction_quick_writes_only_where_told(tmp_path):
    """The whole upstream layer of the installed pin (its DeepseekV2MoE, with its release folder's hook)."""
    out, png = tmp_path / "a" / "bench.json", tmp_path / "b" / "bench.png"
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_moe_compaction.py"), "--quick", "--hidden", "64",
         "--experts", "16", "--top-k", "4", "--inter", "16", "--repeats", "1", "--json", str(out), "--png", str(png)],
        cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: compact path not faster (timing, not tested)
    result = json.loads(out.read_text())
    assert result["quick"] is True and result["shape"]["rows"] == 256
    assert [r["dummy_fraction"] for r in result["rows"]] == [0.0, 0.12, 0.25, 0.5]
    assert [r["valid_rows"] for r in result["rows"]] == [256, 225, 192, 128]
    assert png.stat().st_size > 0
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["bench.json", "bench.png"]


def test_boundary_only_mode_needs_neither_sglang_nor_rich(tmp_path):
    """What scripts/gpu_check.sh runs on a host with torch alone."""
    out = tmp_path / "boundary.json"
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['bench', '--boundary-only', '--quick', '--hidden', '64', '--repeats', '1', '--json', {str(out)!r}]\n"
        "try:\n"
        f"    runpy.run_path({str(REPO / 'scripts' / 'bench_moe_compaction.py')!r}, run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "print('IMPORTED', sorted(m for m in sys.modules if m.split('.')[0] in ('sglang', 'rich')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=subprocess_env(), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "IMPORTED []" in proc.stdout
    result = json.loads(out.read_text())
    assert result["mode"] == "boundary-only" and result["passed"] is True
    assert [(r["dummy_fraction"], r["valid_rows"]) for r in result["rows"]] == [(0.12, 225), (0.25, 192), (0.5, 128)]
