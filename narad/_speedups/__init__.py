"""Optional compiled code, and the rule that picks it.

Two kinds, both built by setup.py when Cython and a C compiler are present:

- Twins: hand-written Cython versions of hot pure-Python functions, here as
  narad/_speedups/*.pyx. The pure-Python function is the reference; a twin must give
  identical results and is picked at import time by `load`.
- Compiled modules: modules of the request path (setup.py's COMPILED) that Cython
  compiles from their own source, unchanged, into an extension beside the `.py`. The
  code is the same; what the build saves is the interpreter's cost per instruction.
  `SourceOrCompiled` decides which of the two files an import runs.

Setting NARAD_PURE=1 in the environment forces pure Python for both kinds (the test
suite runs both ways).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ExtensionFileLoader, ModuleSpec, PathFinder
from importlib.util import spec_from_file_location
from types import ModuleType

PURE = os.environ.get("NARAD_PURE", "") not in ("", "0")

logger = logging.getLogger("narad.speedups")

# A source written this long after its build was edited since. (An install writes
# both files at nearly the same time, in either order.)
STALE_AFTER_S = 2.0


def load(name: str) -> ModuleType | None:
    """The compiled twin `narad._speedups.<name>`, or None when absent or disabled."""
    if PURE:
        return None
    try:
        return importlib.import_module(f"narad._speedups.{name}")
    except ImportError:
        return None


class SourceOrCompiled(MetaPathFinder):
    """For a Narad module that exists both as `name.py` and as a compiled extension
    beside it, picks the `.py` under NARAD_PURE=1, and also when the `.py` was changed
    after the extension was built (a stale build does not run code that is no longer
    the source's). Python alone would always pick the extension."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not fullname.startswith("narad.") or path is None:
            return None
        spec = PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, ExtensionFileLoader) or not spec.origin:
            return spec
        built = spec.origin
        source = os.path.join(os.path.dirname(built), fullname.rpartition(".")[2] + ".py")
        if not os.path.exists(source):
            return spec  # a twin: `load` decides
        if PURE:
            return spec_from_file_location(fullname, source)
        if os.path.getmtime(source) > os.path.getmtime(built) + STALE_AFTER_S:
            logger.warning("%s changed after it was compiled: running it as source", source)
            return spec_from_file_location(fullname, source)
        return spec


def install() -> None:
    """Put `SourceOrCompiled` first among the import finders (once)."""
    if not any(isinstance(f, SourceOrCompiled) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceOrCompiled())
