"""Surviving mutants judged equivalent, each with the reason no test can tell it from the original.

Used by ``scripts/mutation_test.py``: a survivor listed here does not count against the mutation
score. Keys are mutmut 3 mutant names (``<module>.x_<function>__mutmut_<n>``, stable while the
mutated function is unchanged); a listed name that no longer exists is simply not found, and a
listed mutant that a test kills counts as killed.
"""

_ABORT = "sglang_overlay.patches.openai_abort_status.status"

_BYTES_DECODE = (
    "bytes need no decoding in _as_int: bytes.strip/isascii/isdigit and int(bytes) give the same "
    "answer as on the decoded text, and a non-ASCII byte fails isascii() either way; a decode error "
    "(strict or an unknown error handler) is caught by normalize_abort_status and also ends as 500"
)
_HTTPSTATUS_FAST_PATH = (
    "the HTTPStatus branch is a fast path: HTTPStatus(400) taken through _as_int instead "
    "(operator.index of the member, then HTTPStatus(400)) is the same member"
)

_MOE_BOUNDARY = "sglang_overlay.patches.moe_cp_compaction.boundary"
_MOE_PRODUCERS = "sglang_overlay.patches.moe_cp_compaction.producers"
_MOE_LAYOUT = "sglang_overlay.patches.moe_cp_compaction.layout"
_MOE_DEVICE_TENSORS = f"{_MOE_LAYOUT}.x\u01c1ComputePaddingLayout\u01c1device_tensors"
_MOE_LAYOUT_INIT = f"{_MOE_LAYOUT}.x\u01c1ComputePaddingLayout\u01c1__init__"

_NONE_BATCH_FAST_PATH = (
    "layout_of(None) is None (every attribute read has a default), so calling it without the "
    "'forward_batch is not None' guard gives the same None and the same upstream call"
)
_ONE_ROW_IS_INCREASING = (
    "the strictly-increasing check on one valid row compares valid_rows[1:] (empty) with "
    "valid_rows[:-1] (empty): all() of nothing is True, so it never raises there either"
)
_REPEAT_INTERLEAVE_INDICES = (
    "torch.repeat_interleave(repeats) with the one tensor argument is defined as "
    "repeat_interleave(arange(len(repeats)), repeats): the same request index per slot"
)
_IS_HASH_ALWAYS_SET = (
    "upstream's DeepseekV2MoE.__init__ always sets self.is_hash, a bool (deepseek_v2.py:712 on "
    "0.5.23), so the getattr default is never read (and a default of None is as falsy as False)"
)
_CPU_TO_CPU_COPY = (
    "a CPU target then takes the copy branch: no pinning (its type is not 'cuda') and "
    "Tensor.to('cpu', non_blocking=True) of a CPU tensor returns that same tensor, so the cached "
    "(index, count) and the materialization count are unchanged"
)
_PINNING_ONLY = (
    "on the CPU-only test host torch.cuda.is_available() is False, so the changed condition is "
    "False as the original is; on a CUDA host it changes only whether the host tensors are pinned "
    "before the copy (same values, dtype and device): only timing on a GPU tells them apart "
    "(scripts/gpu_check.sh's moe_boundary step ran the original on an H200 on 2026-12-04 with no "
    "host sync flagged under sync debug mode; the mutant itself was not run there)"
)
_CUDA_ONLY_LINE = (
    "the pinning line runs only for a 'cuda' device with CUDA available, never on the CPU-only "
    "test host (no CPU test can construct a CUDA tensor); scripts/gpu_check.sh's moe_boundary "
    "step ran it on an H200 on 2026-12-04 (no host sync flagged)"
)
_NON_BLOCKING_ONLY = (
    "non_blocking only makes a host-to-device copy asynchronous: the values, dtype and device are "
    "the same, and a copy to the CPU or to 'meta' (the CPU tests' accelerator stand-in) is "
    "synchronous either way"
)

_HC = "sglang_overlay.patches.cp_hicache_owner_lanes"

_MEMO_ONLY = (
    "owner_counts_by_size is a memo: without the lookup or the store the counts are recomputed from "
    "the same three integers on every call, the same tuple"
)
_NONE_MEANS_SHARD_SIZE = (
    "owner_counts(None) is owner_counts(shard_size): n defaults to the shard size in its first line"
)
_OVERWRITTEN_BY_REBUILD = "the constructor's last line, rebuild(), assigns _heap and _queued again"

_FINISH_GUARD = (
    "a plan without an index never pops (popped is filled only through index.ordered), and restoring an "
    "empty popped list is a no-op: 'and' for 'or' in finish_plan's early return changes nothing"
)
_PROM_WITH_COLLECTOR = (
    "_prom is reached only through _inc, which returns first when no collector is bound: the "
    "'collector is not None' test in _prom is always true where it runs"
)


EQUIVALENT: dict[str, str] = {
    f"{_ABORT}.x__as_int__mutmut_2": _BYTES_DECODE,  # decode skipped: bytes handled as bytes
    f"{_ABORT}.x__as_int__mutmut_7": _BYTES_DECODE,  # decode("ascii") strict
    f"{_ABORT}.x__as_int__mutmut_9": _BYTES_DECODE,  # "ASCII": the same codec
    f"{_ABORT}.x__as_int__mutmut_10": _BYTES_DECODE,  # unknown error handler, only looked up on an error
    f"{_ABORT}.x__as_int__mutmut_11": _BYTES_DECODE,  # "REPLACE": likewise
    f"{_ABORT}.x_normalize_abort_status__mutmut_3": _HTTPSTATUS_FAST_PATH,  # value > 400
    f"{_ABORT}.x_normalize_abort_status__mutmut_4": _HTTPSTATUS_FAST_PATH,  # value >= 401
    f"{_MOE_BOUNDARY}.x_run_on_valid_rows__mutmut_3": _NONE_BATCH_FAST_PATH,  # guard 'or True'
    f"{_MOE_BOUNDARY}.x_run_on_valid_rows__mutmut_53": _IS_HASH_ALWAYS_SET,  # default None
    f"{_MOE_BOUNDARY}.x_run_on_valid_rows__mutmut_56": _IS_HASH_ALWAYS_SET,  # no default
    f"{_MOE_BOUNDARY}.x_run_on_valid_rows__mutmut_59": _IS_HASH_ALWAYS_SET,  # default True
    f"{_MOE_LAYOUT_INIT}__mutmut_27": _ONE_ROW_IS_INCREASING,  # numel() >= 1
    f"{_MOE_PRODUCERS}.x_lane_slot_tokens__mutmut_26": _REPEAT_INTERLEAVE_INDICES,  # repeat_interleave(slots)
    f"{_MOE_DEVICE_TENSORS}__mutmut_13": _CPU_TO_CPU_COPY,  # device.type != "XXcpuXX"
    f"{_MOE_DEVICE_TENSORS}__mutmut_14": _CPU_TO_CPU_COPY,  # device.type != "CPU"
    f"{_MOE_DEVICE_TENSORS}__mutmut_15": _PINNING_ONLY,  # 'cuda' or CUDA available
    f"{_MOE_DEVICE_TENSORS}__mutmut_16": _PINNING_ONLY,  # not 'cuda' and CUDA available
    f"{_MOE_DEVICE_TENSORS}__mutmut_17": _PINNING_ONLY,  # "XXcudaXX": never pinned
    f"{_MOE_DEVICE_TENSORS}__mutmut_18": _PINNING_ONLY,  # "CUDA": never pinned
    f"{_MOE_DEVICE_TENSORS}__mutmut_19": _CUDA_ONLY_LINE,  # index, count = None
    f"{_MOE_DEVICE_TENSORS}__mutmut_24": _NON_BLOCKING_ONLY,  # index: non_blocking omitted
    f"{_MOE_DEVICE_TENSORS}__mutmut_25": _NON_BLOCKING_ONLY,  # index: non_blocking=False
    f"{_MOE_DEVICE_TENSORS}__mutmut_30": _NON_BLOCKING_ONLY,  # count: non_blocking omitted
    f"{_MOE_DEVICE_TENSORS}__mutmut_31": _NON_BLOCKING_ONLY,  # count: non_blocking=False
    f"{_HC}.planner.x_finish_plan__mutmut_1": _FINISH_GUARD,
    f"{_HC}.counters.x\u01c1OwnerLaneCounters\u01c1_prom__mutmut_3": _PROM_WITH_COLLECTOR,
    **{f"{_HC}.metadata.x\u01c1CpHiCacheNodeMetadata\u01c1owner_counts__mutmut_{n}": _MEMO_ONLY for n in (5, 6, 34)},
    f"{_HC}.metadata.x\u01c1CpHiCacheNodeMetadata\u01c1owner_counts__mutmut_23": _NONE_MEANS_SHARD_SIZE,
    **{f"{_HC}.leaf_index.x\u01c1LeafOrderIndex\u01c1__init____mutmut_{n}": _OVERWRITTEN_BY_REBUILD for n in (5, 6)},
}

# ---- cp-hicache-owner-lanes on 0.5.23 (unified/): sglang 0.5.23 source lines cited
_UN = f"{_HC}.unified"
_KEYWORD_ONLY = (
    "upstream's UnifiedRadixCache._load_back_transfers is keyword-only (unified_radix_cache.py:1857-1860, "
    "'self, *, node_id'), so the hook's *args is always empty and dropping it changes no call"
)
_AVAILABLE_FIRST = (
    "upstream's _load_back_transfers reads _component_available_size(FULL) (unified_radix_cache.py:1901) "
    "before its only evict_for_alloc call (:1904), so the gate has always decided by then: the shadow's "
    "pre-decision branch (the saved evict_for_alloc, its arguments) never runs inside a load"
)
_SHADOW_ALWAYS_SET = (
    "the key was set on the instance earlier in the same call (LaneGate.__enter__, or the line before "
    "the try in execute_kv_backup_hook), so pop without a default never meets a missing key"
)
_PLANNED_NONE_IS_FALSE = "record_capacity tests 'if planned:'; None and False take the same branch"
_STATE_LATER_CHECKS = (
    "both halves of the guard are re-checked below: a None cache has no tree_core (None returned), and a "
    "cache's LaneState names its own interleaved allocator, so any other allocator fails "
    "'state.allocator is not allocator'"
)
_HOST_POOL_FOUND = (
    "host_free_per_lane is reached only through lanes_have_room, after _host_group found a "
    "PageInterleaveHostPool at cache_controller.mem_pool_host.anchor_entry.host_pool: every getattr "
    "finds its attribute (and class_free_page_counts), so the defaults are never used"
)
_FALLBACK_UNREACHABLE = (
    "unreachable on 0.5.23: a page-interleaved KV pool always gets a PageInterleaveHostPool "
    "(hybrid_pool_assembler.py:234-235), whose alloc asserts a start owner (pool_host/page_interleave.py:75), "
    "which rotation_phase_of gives only for a node with a rotation_base; so every host-resident top node "
    "has owner metadata and lane_need never reads the host slot"
)
EQUIVALENT.update(
    {
        **{f"{_UN}.gate.x_load_back_transfers_hook__mutmut_{n}": _KEYWORD_ONLY for n in (6, 20)},
        f"{_UN}.gate.x\u01c1LaneGate\u01c1__enter____mutmut_12": _AVAILABLE_FIRST,
        **{f"{_UN}.gate.x\u01c1LaneGate\u01c1evict_for_alloc__mutmut_{n}": _AVAILABLE_FIRST for n in (2, 3, 4)},
        f"{_UN}.gate.x\u01c1LaneGate\u01c1__exit____mutmut_5": _SHADOW_ALWAYS_SET,
        f"{_UN}.host_backup.x_execute_kv_backup_hook__mutmut_55": _SHADOW_ALWAYS_SET,
        f"{_UN}.capacity.x_evict_to_free_tokens_hook__mutmut_39": _PLANNED_NONE_IS_FALSE,
        f"{_UN}.capacity.x__state__mutmut_1": _STATE_LATER_CHECKS,
        **{f"{_UN}.host_backup.x__kv_host_pool__mutmut_{n}": _HOST_POOL_FOUND for n in (6, 14, 22, 29)},
        **{f"{_UN}.host_backup.x_host_free_per_lane__mutmut_{n}": _HOST_POOL_FOUND for n in (6, 15, 18)},
        **{f"{_UN}.planning.x_lane_need__mutmut_{n}": _FALLBACK_UNREACHABLE for n in (14, 15, 16, 17, 18, 19)},
    }
)

# ---- cluster-consistency (its root modules are version-free)
_CC = "sglang_overlay.patches.cluster_consistency"
_KEY_ORDER = (
    "digest() builds its dict in state.COMPARED's order, which is the same in every rank that runs this code, so "
    "json.dumps without sort_keys gives every such rank the same text; a rank running other code differs in "
    "'overlay' already, and is named for that"
)
_BYTES_PARSE = (
    "verdict._lines decodes the store's bytes first, but bytes.splitlines, bytes.strip and json.loads(bytes) "
    "(UTF-8) give the same lines and dicts as on the decoded text"
)
EQUIVALENT.update(
    {
        **{f"{_CC}.verdict.x_digest__mutmut_{n}": _KEY_ORDER for n in (3, 5, 7)},  # sort_keys None, gone, False
        f"{_CC}.verdict.x__lines__mutmut_2": _BYTES_PARSE,
    }
)
