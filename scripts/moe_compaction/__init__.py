"""bench_moe_compaction.py's two measurements: the boundary alone (``boundary``: torch and the overlay only) and
the installed pin's whole ``DeepseekV2MoE`` padded against its hook (``full``: needs sglang)."""
