"""The runner's own dependencies: the ``gsm8k`` extra of sglang-overlay, and the advice when one is missing.

The plugin that SGLang loads in every process needs none of these, so they are not
core dependencies: ``pip install 'sglang-overlay[gsm8k]'`` adds them. ``missing()``
imports each for real (a broken install counts as missing, and is found before a
long run rather than at the plots after it); the command stops with ``advice()``
and exit code 2. Cost: the three imports, about 0.3 s once per process.
"""

from __future__ import annotations

import importlib

# import name: what it does for the runner
PACKAGES = {
    "httpx": "the HTTP client",
    "tqdm": "the progress bar",
    "matplotlib": "accuracy.png and latency.png",
}
INSTALL = "pip install 'sglang-overlay[gsm8k]'"


def missing() -> dict[str, str]:
    """{package: why it failed to import} for each of PACKAGES that cannot be imported here."""
    out = {}
    for name in PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            out[name] = str(exc) or type(exc).__name__
    return out


def advice(failed: dict[str, str]) -> str:
    """One line naming what is missing (and why, where it is not plainly absent) and the install command."""
    broken = [f"{name}: {why}" for name, why in failed.items() if why != f"No module named '{name}'"]
    detail = f" ({'; '.join(broken)})" if broken else ""
    return (
        f"sglang-overlay gsm8k: missing {', '.join(failed)} from the runner's gsm8k extra{detail}; "
        f"install it with: {INSTALL}"
    )
