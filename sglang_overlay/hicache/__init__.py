"""CP HiCache owner lanes (patch ``cp-hicache-owner-lanes``).

HiCache load-back under page-owner KV residency: per-node owner metadata kept on
the CPU (:mod:`.metadata`), owner-lane eviction planning with zero tensor work
(:mod:`.planner`), owner-classed load-back through the allocator's class lists
(:mod:`.load_back`), operator counters (:mod:`.counters`) and the hooks that wire
them into upstream's ``HiRadixCache`` (:mod:`.hooks`).
"""
