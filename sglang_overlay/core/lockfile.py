"""patches/upstream.lock: the upstream pin and every hooked target's fingerprint.

The lock is the one place the pin lives: the package, scripts/apply_patches.sh
and the tests all read it. ``patches/upstream.lock`` is the default pin;
each other supported upstream release has its own folder
``patches/pins/<version>/`` (its lock, and its series once generated). In a
process the lock is the one whose version is the installed sglang's, else the
default (whose version check then names every supported pin). JSON, sorted, one
target per entry::

    {"upstream": {"package": "sglang", "version": "0.5.20", "wheel": ..., "wheel_sha256": ...,
                  "torch": "2.13.0", "torchvision": "0.28.0", "python": "3.11"},
     "modules": {"<module>": "sha256:<seal: the file's digest bound to its targets' fingerprints>"},
     "targets": {"<module>.<qualname>": {"patch": id, "module": ..., "qualname": ...,
                                         "hook_type": "AROUND", "fingerprint": "sha256:..."}}}

``sglang-overlay lock`` regenerates it from the installed upstream.

Invariants: the lock is the only place the pin lives; JSON sorted, so regenerating an unchanged
upstream is byte-identical; a hand-edited fingerprint breaks its module's seal; a pin folder is
named by its lock's version. Cost: one small JSON read per process, plus one metadata lookup of the
installed sglang version and a listing of ``patches/pins/``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from sglang_overlay.core import settings
from sglang_overlay.core.introspection import sha256_tag

LOCK_NAME = "upstream.lock"
PINS_DIR = "pins"


@dataclass(frozen=True)
class Pin:
    package: str
    version: str
    wheel: str
    wheel_sha256: str
    torch: str
    torchvision: str
    python: str
    torch_pip: str = "isolated"  # how apply_patches.sh installs torch: "isolated" or "config" (this host's index)


def patches_dir() -> Path:
    """The series folder: ``patches/`` of the source checkout this package runs from, else the copy
    a built wheel ships as ``sglang_overlay.series``."""
    checkout = Path(__file__).resolve().parents[2] / "patches"
    if (checkout / LOCK_NAME).is_file():
        return checkout
    return Path(str(resources.files("sglang_overlay.series")))


def _default_version(base: Path) -> str:
    return read_lock(base / LOCK_NAME)["upstream"]["version"]


def pin_dirs() -> dict[str, Path]:
    """Every supported upstream release -> its folder: ``patches/`` for the default pin, then
    ``patches/pins/<version>/`` for each other one."""
    base = patches_dir()
    found = {_default_version(base): base}
    pins = base / PINS_DIR
    for folder in sorted(pins.iterdir()) if pins.is_dir() else ():
        if (folder / LOCK_NAME).is_file():
            found.setdefault(folder.name, folder)
    return found


def pin_dir(version: str) -> Path:
    """The folder of ``version``'s pin, existing or not (``patches/pins/<version>/`` unless default)."""
    base = patches_dir()
    if _default_version(base) == version:
        return base
    return base / PINS_DIR / version


def default_lock_path() -> Path:
    """The lock of the pin the installed sglang matches, else the default pin's
    (``patches/upstream.lock``)."""
    from sglang_overlay.core.verify import installed_sglang_version

    installed = installed_sglang_version()
    base = patches_dir()
    if installed is None or installed == _default_version(base):
        return base / LOCK_NAME  # the default pin: no listing of patches/pins/
    return pin_dirs().get(installed, base) / LOCK_NAME


def lock_path() -> Path:
    override = settings.lock_override()
    return Path(override) if override else default_lock_path()


def read_lock(path: Path | None = None) -> dict:
    path = path or lock_path()
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"sglang-overlay: upstream lock {path} is missing") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"sglang-overlay: upstream lock {path} is not valid JSON: {exc}") from exc
    if "upstream" not in data or "targets" not in data:
        raise ValueError(f"sglang-overlay: upstream lock {path} lacks 'upstream' or 'targets'")
    return data


def read_pin(path: Path | None = None) -> Pin:
    return Pin(**read_lock(path)["upstream"])


def write_lock(data: dict, path: Path | None = None) -> Path:
    path = Path(path or default_lock_path())
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_lock(patches, pin: Pin, fingerprint, file_digest) -> dict:
    """A lock for ``patches``: per-target fingerprints from ``fingerprint(module, qualname)`` and,
    per hooked module, a seal of the whole file's ``file_digest(module)`` and those fingerprints
    (start-up skips parsing a module whose file is unchanged)."""
    targets = {}
    for patch in patches:
        for target in patch.targets:
            targets[target.path] = {
                "patch": patch.id,
                "module": target.module,
                "qualname": target.qualname,
                "hook_type": target.hook_type,
                "fingerprint": fingerprint(target.module, target.qualname),
            }
    modules = {
        module: module_seal(file_digest(module), module_fingerprints(targets, module))
        for module in sorted({t["module"] for t in targets.values()})
    }
    return {"upstream": pin.__dict__, "modules": modules, "targets": targets}


def module_fingerprints(targets: dict, module: str) -> dict[str, str]:
    return {path: t["fingerprint"] for path, t in targets.items() if t.get("module") == module}


def module_seal(file_digest: str | None, fingerprints: dict[str, str]) -> str:
    """Binds a module file's digest to the fingerprints locked for its targets: equal seals mean the
    installed file is the one those fingerprints were computed from (a hand-edited fingerprint breaks it)."""
    text = "\n".join([str(file_digest)] + [f"{p}={f}" for p, f in sorted(fingerprints.items())])
    return sha256_tag(text)
