"""The overlay's core: what every patch relies on and no patch owns.

- ``registry``: declarations (``Patch``, ``Target``, ``Knob``) and their discovery from ``sglang_overlay/patches/``;
- ``lockfile`` / ``fingerprint`` / ``introspection``: the pin, target fingerprints, shared AST and attribute helpers;
- ``verify``: the side-effect-free plan (``Status`` per target);
- ``hooking``: applying the plan in a process (lazy finder, proof, revert);
- ``source_form`` / ``series``: the same declarations as a diff series over the upstream sources;
- ``settings``: the core's environment variables and the readers patches use for theirs.

The core knows patches only through the registry. Importing it imports neither torch nor sglang.

Invariants: no module here imports a patch's implementation; only ``hooking`` resolves hooks.
Cost: importing the core reads no file (the lock is read on first use).
"""
