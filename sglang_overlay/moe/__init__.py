"""MoE boundary under context parallelism (patch ``moe-cp-compaction``).

``layout``: the compute-padding layout of a rank's CP-local rows (which rows are
valid, which are dummy), its two producers, and how a forward batch carries it.
``boundary``: the hooks on ``DeepseekV2MoE`` that run sparse MoE on the valid
rows only and restore the padded row layout afterwards.
"""
