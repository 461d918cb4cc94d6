"""The ONE readiness rule: would this launch run patched? Start-up (the plugin, ``core.hooking``), ``check`` and
``launch`` all ask :func:`ready` and differ only in how they react to its :class:`Problem` s (strict refuses;
non-strict skips a patch that does not verify, warns on the rest, refuses a fatal one), so ``launch`` refuses
exactly what start-up would, plus what only a launcher can see (the plugin not discoverable, sglang not
importing). The rule is the list :data:`RULES`, in order; a new rule joins it there.

Invariants: nothing here hooks or imports a patch's implementation; nothing imports sglang except the
``environment`` rules (``check``, ``launch``). Cost: what :func:`verify.make_plan` costs, plus a few
metadata lookups; the ``environment`` rules cost what ``import sglang`` costs (seconds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points

from sglang_overlay.core import installed, process_hook, settings
from sglang_overlay.core.verify import Plan


def unreached_patches(plan: Plan) -> list[str]:
    """Enabled patches that would run in processes SGLang starts without ``load_plugins()`` (tokenizer workers)."""
    return [p.id for p in plan.enabled if p.process in process_hook.NO_PLUGIN_PROCESSES]


def process_hook_problem(plan: Plan, role: str | None = None, argv: list[str] | None = None) -> str | None:
    """Why a process SGLang starts without ``load_plugins()`` could run an enabled patch's targets unpatched:
    no ``.pth`` hook here, a patch of the HTTP process enabled, and this process one that starts tokenizer
    workers with more than one asked for (or not told). None when nothing is at risk."""
    if process_hook.installed_path() is not None or settings.process_start_marked():
        return None
    at_risk = unreached_patches(plan)
    if not at_risk or (role is not None and role not in process_hook.LAUNCHER_ROLES):
        return None  # schedulers, detokenizers and DP controllers start no tokenizer worker
    workers = process_hook.tokenizer_workers_requested(argv)
    if workers == 1:
        return None
    asked = f"--tokenizer-worker-num {workers}" if workers else "possibly more than one, not told by the command line"
    return (
        f"the process-start hook ({process_hook.PTH_NAME}) is not in {process_hook.site_dirs()[0]}: SGLang would "
        f"start the tokenizer worker processes ({asked}) without load_plugins(), and patch(es) {at_risk} would "
        "run unpatched there. Reinstall the overlay non-editable (pip install sglang-overlay: the wheel carries "
        "the hook), or write it: sglang-overlay process-hook --install."
    )


def plugin_discovery() -> tuple[bool, str]:
    """Will SGLang's ``load_plugins()`` run the overlay in this environment? (its entry point, loaded)"""
    eps = [ep for ep in entry_points(group=settings.PLUGIN_GROUP) if ep.name == settings.PLUGIN_NAME]
    if not eps:
        return (
            False,
            f"no '{settings.PLUGIN_NAME}' entry point in {settings.PLUGIN_GROUP} (is sglang-overlay installed?)",
        )
    try:
        loaded = eps[0].load()
    except Exception as exc:  # what SGLang would log and then start without us
        return False, f"entry point {eps[0].value} fails to load: {exc!r}"
    if (getattr(loaded, "__module__", None), getattr(loaded, "__qualname__", None)) != (settings.PLUGIN_MODULE, "load"):
        return False, f"entry point {eps[0].value} loads {loaded!r}, not this overlay (shadowed?)"
    whitelist = settings.sglang_plugins_whitelist()
    if whitelist is not None and settings.PLUGIN_NAME not in whitelist:
        return False, (
            f"{settings.SGLANG_PLUGINS}={settings.sglang_plugins_raw()!r} does not name "
            f"'{settings.PLUGIN_NAME}': SGLang would skip the overlay silently. Add it to the list or unset it."
        )
    return True, f"{eps[0].value} (dist {eps[0].dist.name if eps[0].dist else '?'})"


class Problem(str):
    """One reason this launch would not run patched: its message (a ``str``: what every report prints) and
    what it concerns, the one thing the reactions differ on. ``patch``: that patch's own refusal (non-strict
    skips the patch whole); ``fatal``: nothing here could run patched (another release, another sglang),
    refused even non-strict; any other: non-strict warns and starts."""

    patch: str | None
    fatal: bool

    def __new__(cls, message: str, patch: str | None = None, fatal: bool = False) -> Problem:
        self = super().__new__(cls, message)
        self.patch, self.fatal = patch, fatal
        return self


@dataclass(frozen=True)
class Rule:
    """One part of :func:`ready`: ``find(plan, role, argv)`` lists its problems. ``environment``: only a
    launcher sees it (``check``, ``launch``), not a process already running the plugin."""

    name: str
    find: Callable[[Plan, str | None, list[str] | None], list[Problem]]
    environment: bool = False


def _sglang(plan: Plan, role, argv) -> list[Problem]:
    return [
        Problem(f"sglang-overlay cannot vouch for this sglang: {m}", fatal=True)
        for m in (installed.identity_problem(),)
        if m
    ]


def _version(plan: Plan, role, argv) -> list[Problem]:
    return [Problem(plan.version_problem, fatal=True)] if plan.version_problem else []


def _framework(plan: Plan, role, argv) -> list[Problem]:
    changed = [s for s in plan.framework if not s.ok]
    if not changed:
        return []
    what = "; ".join(s.describe() for s in changed)
    return [Problem(f"SGLang's plugin framework is not the one sglang-overlay was written against: {what}. Nothing "
                    "is hooked through a changed framework: install a supported sglang, or port the core to it "
                    "(sglang-overlay rebase-check names what moved).", fatal=True)]  # fmt: skip


def _patches(plan: Plan, role, argv) -> list[Problem]:
    return [Problem(r, patch=p.id) for p in plan.enabled if (r := plan.refusal(p))]


def _process_hook(plan: Plan, role, argv) -> list[Problem]:
    return [Problem(m) for m in (process_hook_problem(plan, role, argv),) if m]


def _discovery(plan: Plan, role, argv) -> list[Problem]:
    discoverable, how = plugin_discovery()
    return [] if discoverable else [Problem(f"SGLang would not load the overlay: {how}")]


def _imports(plan: Plan, role, argv) -> list[Problem]:
    return [Problem(m) for m in (installed.import_problem(),) if m]


RULES: list[Rule] = [
    Rule("the imported sglang is the installed one", _sglang),
    Rule("version pin", _version),
    Rule("the plugin framework verifies", _framework),
    Rule("patches verify", _patches),
    Rule("process-start hook", _process_hook),
    Rule("plugin discoverable", _discovery, environment=True),
    Rule("sglang imports", _imports, environment=True),
]


def ready(
    plan: Plan, role: str | None = None, argv: list[str] | None = None, environment: bool = False
) -> list[Problem]:
    """Everything that keeps this launch from running patched, one :class:`Problem` each (empty: ready).

    Start-up (the plugin, ``environment=False``) asks the rules a running process can see: the imported sglang
    is the installed one (``core.installed``), the version pin,
    each enabled patch's fingerprints, the process-start hook. ``check`` and ``launch`` (``environment=True``)
    add the rest. A fatal problem ends the list: nothing after it could be told."""
    problems: list[Problem] = []
    for rule in RULES:
        if rule.environment and not environment:
            continue
        found = rule.find(plan, role, argv)
        problems += found
        if any(p.fatal for p in found):
            break
    return problems
