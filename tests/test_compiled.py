"""Which file an import of a compiled module runs: its build, or its source when
NARAD_PURE=1 or when the source changed after the build (narad/_speedups)."""

from __future__ import annotations

import ast
import importlib
import os
import shutil
from pathlib import Path

import pytest

from narad._speedups import PURE, SourceOrCompiled

ROOT = Path(__file__).resolve().parents[1]


def compiled_modules() -> list[str]:
    """setup.py's COMPILED, as module names."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COMPILED":
            paths = ast.literal_eval(node.value)
            return [p.removesuffix(".py").replace("/", ".") for p in paths]
    raise AssertionError("setup.py has no COMPILED list")


@pytest.fixture
def some_extension() -> Path:
    """A built extension of this tree (a twin's)."""
    found = next((ROOT / "narad" / "_speedups").glob("_format.*.so"), None)
    if found is None:
        pytest.skip("no compiled extension here")
    return found


def test_compiled_modules_run_built_or_as_source_as_asked() -> None:
    """CI sets NARAD_REQUIRE_SPEEDUPS=1 so that the compiled path is really tested."""
    names = compiled_modules()
    assert "narad.queues.service" in names
    if not PURE and os.environ.get("NARAD_REQUIRE_SPEEDUPS") != "1":
        pytest.skip("neither NARAD_PURE nor NARAD_REQUIRE_SPEEDUPS is set")
    files = {name: importlib.import_module(name).__file__ or "" for name in names}
    wanted = ".py" if PURE else ".so"
    assert all(f.endswith(wanted) for f in files.values()), files


def test_a_build_older_than_its_source_is_not_run(tmp_path: Path, some_extension: Path) -> None:
    """`some_extension` stands in for the build of a source beside it."""
    import narad.log.format as any_module

    suffix = some_extension.name.removeprefix("_format")
    source = tmp_path / "mod.py"
    built = tmp_path / f"mod{suffix}"
    shutil.copy(any_module.__file__ or "", source)
    shutil.copy(some_extension, built)
    finder = SourceOrCompiled()

    os.utime(source, (1_000, 1_000))
    os.utime(built, (2_000, 2_000))
    spec = finder.find_spec("narad.mod", [str(tmp_path)])
    assert spec is not None and spec.origin == str(source if PURE else built)

    os.utime(source, (2_001, 2_001))  # written with the build: not an edit
    spec = finder.find_spec("narad.mod", [str(tmp_path)])
    assert spec is not None and spec.origin == str(source if PURE else built)

    os.utime(source, (2_100, 2_100))  # edited after the build
    spec = finder.find_spec("narad.mod", [str(tmp_path)])
    assert spec is not None and spec.origin == str(source)


def test_a_twin_is_left_to_its_loader(some_extension: Path) -> None:
    """An extension with no source beside it (narad/_speedups/*.pyx) is found as usual;
    `load` decides whether it runs."""
    spec = SourceOrCompiled().find_spec("narad._speedups._format", [str(some_extension.parent)])
    assert spec is not None and spec.origin == str(some_extension)


def test_other_packages_are_not_its_business() -> None:
    assert SourceOrCompiled().find_spec("json.decoder", None) is None
    assert SourceOrCompiled().find_spec("redis.client", ["/nowhere"]) is None
