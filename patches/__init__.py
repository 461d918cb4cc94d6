"""Data package: ships patches/ (descriptions, pins and their locks) as sglang_overlay.data."""
