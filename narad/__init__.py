"""Narad: a message queue with durable logs that speaks the Redis protocol."""

from narad import _speedups

__version__ = "0.1.0"

# Before any other Narad module is imported: which of a module's source and its
# compiled build runs (narad/_speedups/__init__.py).
_speedups.install()
