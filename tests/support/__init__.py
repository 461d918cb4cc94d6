"""Test-only helpers (importable as tests.support from the repository root)."""
