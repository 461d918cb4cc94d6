"""The overlay's core: declare, verify, hook. What every patch relies on and no patch owns, in layers (each
imports only those below it).

1. ``settings``, ``introspection``, ``propagation``, ``import_watch`` (and ``sglang_overlay.errors``): environment
   variables, AST and attribute helpers, the narrowed walk for stale bindings, the after-exec import finder;
2. ``installed``, ``identity``, ``fingerprint``, ``process_hook``: the installed upstream (version, sources), the
   ``.pth`` line and the mark that makes children apply the overlay;
3. ``lockfile``: the pins and their locks; ``rebase`` compares a lock with another wheel;
4. *declare*: ``declarations`` (``Patch``, ``Release``, ``Target``, ``Dependency``, ``Knob``), ``registry`` (finds
   them; the overlay this process declares), ``framework`` (SGLang's plugin framework as the core relies on it);
5. *verify*: ``verify`` (the plan per target), ``readiness`` (the one ``ready()`` rule over it: start-up, check,
   launch), ``needed`` (each patch's probe);
6. *hook*: ``hooking`` (applying the plan in a process: lazy finder, proof, revert; observers told, never asked).

Above the core: ``sglang_overlay.observe`` (records, roles, the INFO line, ``/metrics``, ``/overlay/status``,
the start-up cost), the entry points (``sglang_overlay.plugin``, ``sglang_overlay.process_start``), then the CLI.
The order is a contract CI checks (``lint-imports``, contracts in pyproject.toml).

Invariants: the core knows patches only through the registry and never imports ``sglang_overlay.observe``; only
``hooking`` resolves hooks. Cost: importing the core reads no file and imports neither torch nor sglang.
"""
