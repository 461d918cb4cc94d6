"""The patches: one folder (package) per patch, each ``__init__.py`` defining ``PATCH = Patch(...)``.

Folders here are discovered automatically and ordered by their declared ``position``.
Keep declarations free of torch/upstream imports: hooks are named as "module:function"
strings and resolved only when their target module is imported.
"""
