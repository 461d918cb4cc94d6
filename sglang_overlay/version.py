"""The overlay's own version, in a module that imports nothing (the core and the package both read it)."""

__version__ = "0.1.0"
