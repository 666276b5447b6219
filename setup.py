"""Builds the optional Cython speedups; everything else is in pyproject.toml.

When Cython or a C compiler is missing the build still succeeds and Narad runs on
the pure-Python twins (see narad/_speedups/__init__.py).
"""

import os

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """A failed extension build leaves the pure-Python path in place."""

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


def extensions() -> list:  # type: ignore[type-arg]
    if os.environ.get("NARAD_PURE_BUILD"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []
    try:
        return cythonize(
            ["narad/_speedups/*.pyx"],
            compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
            quiet=True,
        )
    except Exception as exc:  # noqa: BLE001 - a failed translation means "no speedups"
        print(f"narad: speedups not translated ({exc}); using pure Python")
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
