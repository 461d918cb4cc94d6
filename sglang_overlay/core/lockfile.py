"""The pins: each supported upstream release's lock, one folder each, and which one is the default.

Every supported release has a folder ``patches/pins/<version>/`` holding its ``upstream.lock``;
``patches/pins/default`` names the default pin in one line. In a process the lock is the
one whose version is the installed sglang's, else the default's (whose version check then names every
supported pin). JSON, sorted, one target per entry::

    {"upstream": {"package": "sglang", "version": "0.5.23", "torch": "2.14.1", "torchvision": "0.29.1",
                  "torch_pip": "config",
                  "wheels": {"3.11": {"file": "sglang-0.5.23-cp311-...whl", "sha256": "..."}, "3.12": {...}}},
     "modules": {"<module>": "sha256:<seal: the file's digest bound to its targets' fingerprints>"},
     "targets": {"<module>.<qualname>": {"patch": id, "module": ..., "qualname": ...,
                                         "hook_type": "AROUND", "fingerprint": "sha256:..."}},
     "dependencies": {"<module>.<qualname>": {"patch": id, "module": ..., "qualname": ...,
                                              "needed_by": "unified.eviction", "fingerprint": "sha256:..."}}}

``wheels`` has one entry per CPython upstream ships that release for (sglang carries Rust extensions, so
one wheel per tag; their Python sources are byte-identical, so one set of fingerprints serves them all).
``sglang-overlay lock`` regenerates a lock from the installed upstream (:func:`regenerate`).

Invariants: the lock is the only place a pin lives; JSON sorted, so regenerating an unchanged upstream
is byte-identical; a hand-edited fingerprint breaks its module's seal; a pin folder is named by its
lock's version. Cost: one small JSON read per process, one metadata lookup of the installed sglang
version and a listing of ``patches/pins/``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from sglang_overlay.core import fingerprint, installed, settings
from sglang_overlay.core.introspection import sha256_tag

LOCK_NAME = "upstream.lock"
PINS_DIR = "pins"
DEFAULT_FILE = "default"  # patches/pins/default: the default pin's version, one line


@dataclass(frozen=True)
class Pin:
    package: str
    version: str
    torch: str
    torchvision: str
    wheels: dict = field(default_factory=dict)  # python "3.12" -> {"file": wheel file name, "sha256": hex}
    torch_pip: str = "isolated"  # how apply_patches.sh installs torch: "isolated" or "config" (this host's index)


def patches_dir() -> Path:
    """The folder of descriptions and pins: ``patches/`` of the source checkout this package runs from,
    else the copy a built wheel ships as ``sglang_overlay.data``."""
    checkout = Path(__file__).resolve().parents[2] / "patches"
    if (checkout / PINS_DIR / DEFAULT_FILE).is_file():
        return checkout
    return Path(str(resources.files("sglang_overlay.data")))


def default_version(base: Path | None = None) -> str:
    """The default pin's version (``patches/pins/default``)."""
    path = (base or patches_dir()) / PINS_DIR / DEFAULT_FILE
    return path.read_text(encoding="utf-8").strip()


def _version_key(name: str):
    try:
        return (0, Version(name))
    except InvalidVersion:
        return (1, name)


def pin_dirs() -> dict[str, Path]:
    """Every supported upstream release -> its folder ``patches/pins/<version>/``, oldest first."""
    pins = patches_dir() / PINS_DIR
    folders = [f for f in pins.iterdir() if (f / LOCK_NAME).is_file()] if pins.is_dir() else []
    return {f.name: f for f in sorted(folders, key=lambda f: _version_key(f.name))}


def pin_dir(version: str) -> Path:
    """The folder of ``version``'s pin, existing or not."""
    return patches_dir() / PINS_DIR / version


def default_lock_path() -> Path:
    """The lock of the pin the installed sglang matches, else the default pin's (whose version then refuses the
    installed one, naming every pin: ``core.installed.version_problem``)."""
    version = installed.installed_sglang_version()
    if version is not None and (pin_dir(version) / LOCK_NAME).is_file():
        return pin_dir(version) / LOCK_NAME
    return pin_dir(default_version()) / LOCK_NAME


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
    """A lock for ``patches`` (``core.framework.Owner`` s: the patches, with the dependencies ``core.dependencies``
    found, and the framework): per-target and per-dependency fingerprints from ``fingerprint(module,
    qualname)`` and, per module, a seal of the whole file's ``file_digest(module)`` and those fingerprints
    (start-up skips parsing a module whose file is unchanged)."""
    dependencies = {}
    for patch in patches:
        for dep in patch.depends:
            entry = dependencies.setdefault(
                dep.path,
                {
                    "patch": patch.id,
                    "module": dep.module,
                    "qualname": dep.qualname,
                    "needed_by": dep.needed_by,
                    "fingerprint": fingerprint(dep.module, dep.qualname),
                },
            )
            if entry["patch"] != patch.id:  # two patches rely on one definition: both are named
                entry["patch"] = ",".join(sorted({*entry["patch"].split(","), patch.id}))
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
    locked = {**dependencies, **targets}
    modules = {
        module: module_seal(file_digest(module), module_fingerprints(locked, module))
        for module in sorted({t["module"] for t in locked.values()})
    }
    return {"upstream": pin.__dict__, "modules": modules, "targets": targets, "dependencies": dependencies}


def module_fingerprints(entries: dict, module: str) -> dict[str, str]:
    return {path: t["fingerprint"] for path, t in entries.items() if t.get("module") == module}


def locked_entries(lock: dict) -> dict:
    """Every fingerprinted definition of a lock: its dependencies and its targets (a seal covers both)."""
    return {**lock.get("dependencies", {}), **lock["targets"]}


def module_seal(file_digest: str | None, fingerprints: dict[str, str]) -> str:
    """Binds a module file's digest to the fingerprints locked for its targets: equal seals mean the
    installed file is the one those fingerprints were computed from (a hand-edited fingerprint breaks it)."""
    text = "\n".join([str(file_digest)] + [f"{p}={f}" for p, f in sorted(fingerprints.items())])
    return sha256_tag(text)


class LockError(ValueError):
    """A lock cannot be regenerated as asked (no sglang, a wheel of another release, a missing target)."""


def wheel_entries(paths, version: str) -> dict:
    """``{python: {"file", "sha256"}}`` for sglang wheels of ``version`` (one per CPython tag it ships)."""
    wheels = {}
    for path in map(Path, paths):
        try:
            name, found, _, tags = parse_wheel_filename(path.name)
        except InvalidWheelFilename as exc:
            raise LockError(str(exc)) from None
        if str(name) != "sglang" or str(found) != version:
            raise LockError(f"{path.name} is not a wheel of the installed sglang {version}")
        for python in {f"{t.interpreter[2]}.{t.interpreter[3:]}" for t in tags if t.interpreter.startswith("cp")}:
            wheels[python] = {"file": path.name, "sha256": sha256_file(path)}
    return wheels


def regenerate(patches, wheel_files=()) -> tuple[Path, dict, dict | None]:
    """The installed release's lock built afresh: (its path, the new data, the current data or None).

    The path is ``patches/pins/<installed version>/upstream.lock`` (a new pin's folder), or the override.
    A new pin starts from the default pin's torch fields (edit them in its lock: apply_patches.sh reads
    them) and needs ``wheel_files`` so the lock records each wheel's sha256."""
    version = installed.installed_sglang_version()
    if version is None:
        raise LockError("no sglang installed")
    path = lock_path() if settings.lock_override() else pin_dir(version) / LOCK_NAME
    current = read_lock(path) if path.exists() else None
    template = current or read_lock(pin_dir(default_version()) / LOCK_NAME)
    same_release = current is not None and current["upstream"]["version"] == version
    wheels = {**(current["upstream"].get("wheels", {}) if same_release else {}), **wheel_entries(wheel_files, version)}
    if not wheels:
        raise LockError(
            f"sglang {version} is not the locked version; pass --wheel FILE for each CPython it ships "
            "(pip download --no-deps sglang==VERSION --python-version 3.12 ...) so the lock records "
            "their sha256"
        )
    upstream = {k: v for k, v in template["upstream"].items() if k in Pin.__dataclass_fields__}
    pin = Pin(**{**upstream, "package": "sglang", "version": version, "wheels": dict(sorted(wheels.items()))})
    try:
        data = build_lock(patches, pin, fingerprint.fingerprint_installed, fingerprint.installed_file_digest)
    except fingerprint.TargetNotFound as exc:
        raise LockError(f"a target is missing in the installed upstream: {exc}") from None
    return path, data, current
