"""The mutation run's verdicts, counted and printed (``scripts/mutation_test.py``): per module, per patch.

Job: a module's statuses become its score (equivalent survivors, listed with their reason in
``tests/support/mutation_equivalents.py``, counted apart), a patch's modules one patch score, a sampled run's
score its 95% Wilson interval. Invariant: pure (no mutmut, no files). Cost: O(mutants).
"""

from __future__ import annotations

from bench_common import wilson  # re-exported: a sampled score's interval (scripts/ is on the caller's path)

from tests.support.mutation_equivalents import EQUIVALENT

KILLED = {"killed", "timeout", "caught by type check", "segfault"}


def summarize(module: str, found: dict[str, str]) -> dict:
    equivalent = {
        name: EQUIVALENT[name] for name, status in found.items() if status == "survived" and name in EQUIVALENT
    }
    counted = {name: status for name, status in found.items() if name not in equivalent}
    killed = sum(status in KILLED for status in counted.values())
    survivors = sorted(name for name, status in counted.items() if status not in KILLED)
    return dict(
        module=module, total=len(found), killed=killed, equivalent=len(equivalent),
        score=killed / len(counted) if counted else 1.0, survivors=survivors, equivalent_reasons=equivalent,
        by_status={s: sum(v == s for v in found.values()) for s in sorted(set(found.values()))},
    )  # fmt: skip


def print_table(rows: list[dict], goal: float) -> None:
    print(f"{'module':<58} {'total':>5} {'killed':>6} {'equiv':>5} {'surv.':>5} {'score':>6}  statuses")
    for r in rows:
        mark = "" if r["score"] >= goal else "  < goal"
        print(f"{r['module']:<58} {r['total']:>5} {r['killed']:>6} {r['equivalent']:>5} {len(r['survivors']):>5} "
              f"{r['score']:>6.1%}  {r['by_status']}{mark}")  # fmt: skip
    for patch in dict.fromkeys(r["patch"] for r in rows):
        print(patch_line(patch, [r for r in rows if r["patch"] == patch], goal))
    for r in rows:
        for m in r["survivors"]:
            print(f"\nsurvivor {m}:\n{r['survivor_diffs'].get(m, '')}")


def patch_score(rows: list[dict]) -> dict:
    """One patch's score over its modules; a sampled run's with its 95% Wilson interval."""
    killed = sum(r["killed"] for r in rows)
    counted = sum(r["total"] - r["equivalent"] for r in rows)
    out = dict(killed=killed, counted=counted, score=killed / counted if counted else 1.0,
               tested=sum(r["total"] for r in rows), generated=sum(r["generated"] for r in rows))  # fmt: skip
    if any(r["sampled"] for r in rows):
        out["interval_95"] = wilson(killed, counted)
    return out


def patch_line(patch: str, rows: list[dict], goal: float) -> str:
    s = patch_score(rows)
    sampled = f" (a sample of {s['tested']} of {s['generated']} mutants; 95% interval {s['interval_95'][0]:.1%}-" \
              f"{s['interval_95'][1]:.1%})" if "interval_95" in s else ""  # fmt: skip
    mark = "" if s["score"] >= goal else "  < goal"
    return f"patch {patch}: {s['killed']} killed of {s['counted']} counted, score {s['score']:.1%}{sampled}{mark}"
