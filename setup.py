"""Builds the optional Cython speedups; everything else is in pyproject.toml.

Two kinds: the hand-written twins in narad/_speedups/*.pyx, and the modules of the
request path in COMPILED, which Cython compiles from their own unchanged source (the
same code, without the interpreter's per-instruction cost). When Cython or a C
compiler is missing the build still succeeds and Narad runs on pure Python; NARAD_PURE=1
forces pure Python at run time (see narad/_speedups/__init__.py).
"""

import os

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """A failed extension build leaves the pure-Python path in place."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1  # one compiler per CPU

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - any build failure means "no speedups"
            print(f"narad: speedups not built ({exc}); using pure Python")

    def build_extension(self, ext) -> None:  # type: ignore[no-untyped-def]
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            print(f"narad: speedup {ext.name} not built ({exc}); using pure Python")


# Modules of the request path, compiled as they are written. Not server.py, client.py
# and dispatch.py nor the parser's glue: they are mostly attribute reads on plain
# objects, which CPython's specialising interpreter does faster than generic compiled
# code (bench/README.md). node.py is compiled: the end of each iteration and the
# held-back adds' replies run there, and compiled they cost less (bench/README.md,
# "One room per job").
COMPILED = [
    "narad/keyspace.py",
    "narad/clock.py",
    "narad/node.py",
    "narad/resp/encoder.py",
    "narad/commands/args.py",
    "narad/held_back.py",
    "narad/commands/frames.py",
    "narad/commands/streams.py",
    "narad/commands/groups.py",
    "narad/commands/queues.py",
    "narad/streams/stream.py",
    "narad/streams/groups.py",
    "narad/streams/pel.py",
    "narad/streams/ids.py",
    "narad/queues/queue.py",
    "narad/queues/service.py",
    "narad/queues/delivery.py",
    "narad/queues/dead_letters.py",
    "narad/queues/fanout.py",
    "narad/queues/push.py",
    "narad/queues/appends.py",
    "narad/queues/replies.py",
    "narad/log/log.py",
    "narad/log/opening.py",
    "narad/log/reading.py",
    "narad/log/journal.py",
    "narad/log/segment.py",
]


def extensions() -> list:  # type: ignore[type-arg]
    if os.environ.get("NARAD_PURE_BUILD"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []

    def translated(paths: list[str], directives: dict[str, object]) -> list:  # type: ignore[type-arg]
        try:
            return cythonize(
                paths, compiler_directives={"language_level": "3", **directives}, quiet=True
            )
        except Exception as exc:  # noqa: BLE001 - a failed translation means "not compiled"
            print(f"narad: {paths[0]}... not translated ({exc}); using pure Python")
            return []

    twins = translated(["narad/_speedups/*.pyx"], {"boundscheck": False, "wraparound": False})
    # Plain Python semantics: annotations are not turned into C types or checks.
    return twins + translated(COMPILED, {"annotation_typing": False})


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
