"""Package discovery for setuptools (metadata lives in pyproject.toml).

Every ``sglang_overlay*`` package is found, so a new patch folder ships without an edit here;
``patches/`` (descriptions, ``upstream.lock``, the diff series, and ``pins/<version>/`` for each
other supported pin) ships inside the package as ``sglang_overlay.series`` so an installed overlay
reads the same locks.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["sglang_overlay", "sglang_overlay.*", "sglang_overlay_gsm8k",
                                    "sglang_overlay_gsm8k.*"]) + ["sglang_overlay.series"],
    package_dir={"sglang_overlay.series": "patches"},
    package_data={"sglang_overlay.series": ["upstream.lock", "*.md", "*.patch", "series",
                                            "pins/*/upstream.lock", "pins/*/*.patch", "pins/*/series"]},
)
