"""The planner's persistent lazy leaf heap and the notifying set that feeds it, on stand-in leaves."""

from __future__ import annotations

from sglang_overlay.patches.cp_hicache_owner_lanes.leaf_index import LeafOrderIndex, NotifyingLeafSet, is_monotone


class _Leaf:
    """A stand-in leaf for the index's own unit tests: a priority and an identity, nothing else."""

    def __init__(self, prio):
        self.prio = prio

    def __repr__(self):
        return f"_Leaf({self.prio})"


def _prio_of(calls):
    def get_priority(node):
        calls.append(node)
        return node.prio

    return get_priority


def test_upstreams_monotone_strategies_are_told_apart():
    from sglang.srt.mem_cache import evict_policy as ep

    assert [is_monotone(ep.LRUStrategy()), is_monotone(ep.LFUStrategy()), is_monotone(ep.FIFOStrategy())] == [True] * 3
    assert [is_monotone(ep.MRUStrategy()), is_monotone(ep.FILOStrategy()), is_monotone(object())] == [False] * 3


def test_notifying_set_calls_the_hook_given_at_construction():
    seen = []
    leaves = NotifyingLeafSet({1}, on_add=seen.append)
    leaves.add(2)
    assert seen == [2] and leaves == {1, 2}


def test_index_compacts_exactly_past_its_bound():
    """Stale entries (leaves that left the set) pile up lazily until the heap passes
    2 x leaves + slack; then one rebuild keeps only live leaves, each read once."""
    a, b = _Leaf(0), _Leaf(1)
    leaves = {a, b}
    calls = []
    index = LeafOrderIndex(leaves, _prio_of(calls), True)
    index.COMPACT_SLACK = 4
    assert len(index) == 2 and sorted(calls, key=id) == sorted([a, b], key=id)
    sizes = []
    for i in range(12):
        x = _Leaf(10 + i)
        leaves.add(x)
        index.note(x)  # three live leaves at the note: the bound is 2 x 3 + 4 = 10
        leaves.discard(x)
        sizes.append(len(index))
    assert sizes == [3, 4, 5, 6, 7, 8, 9, 10, 3, 4, 5, 6]
    calls.clear()
    popped = []
    assert list(index.ordered(popped)) == [a, b]


def test_a_stale_leaf_that_returns_is_queued_again():
    a, x = _Leaf(0), _Leaf(5)
    leaves = {a, x}
    index = LeafOrderIndex(leaves, _prio_of([]), True)
    leaves.discard(x)  # x leaves the set: its entry goes stale
    popped = []
    assert list(index.ordered(popped)) == [a]  # the walk drops the stale entry
    index.restore(popped)
    leaves.add(x)
    index.note(x)  # back in the set: must be walked again
    popped = []
    assert list(index.ordered(popped)) == [a, x]
