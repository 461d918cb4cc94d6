"""Data package: ships patches/ (upstream.lock, descriptions, diff series) as sglang_overlay.series."""
