"""The code's layers, as import-linter checks them (pyproject.toml's [tool.importlinter]; `make test` runs
`lint-imports` first): the contract holds, a planted upward import breaks it, no module of app/ is in an
import cycle, and docs/architecture.md's map is the contract's own list."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: import-linter brings tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [layers] = [contract["layers"] for contract in config["contracts"] if contract["type"] == "layers"]
    return layers


def lint(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--config", str(folder / "pyproject.toml"), "--no-cache"],
                          cwd=folder, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(folder)})


def test_the_layer_contract_is_kept():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("planted", [
    ("errors.py", "from app.serve import builder  # planted\n"),  # the bottom reaching the top
    ("sandbox/documents.py", "from app.pipeline import preprocess  # planted\n"),  # a decoder reaching its caller
    ("engines/ppocr.py", "from app.formats import hocr  # planted\n"),  # siblings that must not meet
])
def test_a_planted_import_against_the_layers_breaks_the_contract(tmp_path, planted):
    shutil.copytree(ROOT / "app", tmp_path / "app", ignore=shutil.ignore_patterns("__pycache__", "static"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert lint(tmp_path).returncode == 0  # the copy keeps the contract, as the tree does
    module, line = planted
    with open(tmp_path / "app" / module, "a") as handle:
        handle.write(line)
    result = lint(tmp_path)
    assert result.returncode != 0 and "BROKEN" in result.stdout
    importer = "app." + module.removesuffix(".py").replace("/", ".")
    assert importer in result.stdout  # it names the import that broke it


def test_no_module_of_app_is_in_an_import_cycle():
    import grimp

    graph = grimp.build_graph("app", cache_dir=None)
    cycles = [(module, other) for module in graph.modules
              for other in graph.find_modules_directly_imported_by(module)
              if graph.chain_exists(importer=other, imported=module)]
    assert cycles == []


def rendered_layers(layers: list[str]) -> str:
    lines = []
    for number, layer in enumerate(layers, start=1):
        names = [f"`{name}`" for name in re.split(r"\s*\|\s*", layer)]
        lines.append(f"{number}. " + " · ".join(names))
    return "\n".join(lines)


def test_the_map_in_the_docs_is_the_contracts():
    docs = (ROOT / "docs" / "architecture.md").read_text()
    expected = rendered_layers(contract_layers())
    assert expected in docs, f"docs/architecture.md must hold the layers as pyproject.toml has them:\n{expected}"
