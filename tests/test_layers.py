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


# --- each part given only its settings (issue 39.2) ----------------------------------------------

def _is_deployment(node) -> bool:
    """A class decorated with serve.deployment (bare or called)."""
    import ast

    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(target) in ("serve.deployment", "deployment"):
            return True
    return False


def constructors_given_settings(sources: dict[str, str]) -> list[str]:
    """`module.Class.method(param)` for each deployment's or engine's constructor (and engine `budget`) with a
    parameter annotated with the whole `Settings`, or named `settings` with no annotation to tell."""
    import ast

    found = []
    for name, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.ClassDef):
                continue
            engine = any(ast.unparse(base).endswith("OCREngine") for base in node.bases)
            if not (engine or _is_deployment(node)):
                continue
            for method in node.body:
                if not (isinstance(method, ast.FunctionDef) and method.name in ("__init__", "budget")):
                    continue
                for arg in method.args.args + method.args.kwonlyargs:
                    annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                    if re.search(r"(?<![\w.])Settings\b", annotation) or (arg.arg == "settings" and not annotation):
                        found.append(f"{name}.{node.name}.{method.name}({arg.arg})")
    return found


def app_sources() -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text() for path in sorted((ROOT / "app").rglob("*.py"))}


def test_no_deployment_or_engine_constructor_takes_the_whole_settings():
    sources = app_sources()
    assert sum("@serve.deployment" in text for text in sources.values()) >= 6  # the walk sees the deployments
    assert constructors_given_settings(sources) == []
    # The check finds what it is for: the OCR replica and an engine given the whole settings again.
    planted = dict(sources)
    replica = "app/pipeline/ocr_model.py"
    planted[replica] = planted[replica].replace("settings: OCRReplicaSettings", "settings: Settings")
    engine = "app/engines/null.py"
    planted[engine] = planted[engine].replace("def __init__(self, options, runtime", "def __init__(self, settings, runtime")
    assert constructors_given_settings(planted) == ["app/engines/null.py.NullEngine.__init__(settings)",
                                                    "app/pipeline/ocr_model.py.OCRModel.__init__(settings)"]


def test_every_engine_is_built_from_its_own_options_and_a_runtime():
    import inspect

    from app.engines.base import OCREngine
    from app.engines.registry import ENGINES, engine_class

    for name in ENGINES:
        try:
            cls = engine_class(name)
        except ImportError:  # vLLM lives in its own environment
            continue
        assert issubclass(cls, OCREngine)
        assert list(inspect.signature(cls.__init__).parameters) == ["self", "options", "runtime"], name
        assert list(inspect.signature(cls.budget).parameters) == ["options", "model_dir"], name
