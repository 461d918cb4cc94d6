"""Patch declarations: one module per patch, each defining ``PATCH = Patch(...)``.

Modules here are discovered automatically (sorted by name). Keep them free of
torch/upstream imports: hooks are named as "module:function" strings.
"""
