"""The overlay's core: what every patch relies on and no patch owns, in layers (each imports only below).

1. ``settings``, ``introspection`` (and ``sglang_overlay.errors``): environment variables, AST and attribute helpers;
2. ``installed``, ``fingerprint``, ``process_hook``: the installed upstream (version, sources), the ``.pth`` line;
3. ``lockfile``: the pins and their locks; ``rebase`` compares a lock with another wheel;
4. ``registry``: finds the declarations (``declarations``: ``Patch``, ``Release``, ``Target``, ``Knob``); version
   and package passed in;
5. ``verify``: the plan per target; ``readiness``: the one ``ready()`` rule over it (start-up, check, launch);
6. ``records``, ``info``, ``processes``, ``server_status``: per-process records, the info metric, roles, the INFO line;
7. ``http_status``: ``GET /overlay/status`` on upstream's app, and the client ``status --url`` asks remotely;
8. ``hooking``: applying the plan in a process (lazy finder, proof, revert).

Above the core: the entry points (``sglang_overlay.plugin``, ``sglang_overlay.process_start``), then the CLI.
The order is a contract CI checks (``lint-imports``, contracts in pyproject.toml).

Invariants: the core knows patches only through the registry; only ``hooking`` resolves hooks.
Cost: importing the core reads no file and imports neither torch nor sglang.
"""
