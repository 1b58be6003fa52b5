"""The package's folders are its layers (docs/ARCHITECTURE.md): a module imports only from its own folder and
the folders below it, and the two job folders, side by side, not from each other."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "bertforge"
# folder -> layer, bottom first; "" is the package's top (cli.py, __init__.py, __main__.py)
LAYERS = {"core": 1, "text": 2, "model": 3, "data": 4, "inference": 5, "tasks": 6, "training": 7,
          "pretraining": 8, "finetuning": 8, "serving": 9, "commands": 10, "": 11}


def module_name(path: Path, package: Path) -> str:
    parts = ("bertforge",) + path.relative_to(package).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def folder(module: str) -> str:
    parts = module.split(".")[1:]
    return parts[0] if parts and parts[0] in LAYERS else ""


def imports(path: Path, package: Path) -> set[str]:
    """The bertforge modules or packages `path` imports, at the top or inside a function."""
    parts = ("bertforge",) + path.relative_to(package).with_suffix("").parts
    here = parts[:-1]  # the package the module is in (a package's __init__ is in itself)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = list(here[:len(here) - node.level + 1]) if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            if name.startswith("bertforge"):
                found.add(name)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("bertforge")}
    return found


def upward_imports(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        name = module_name(path, package)
        here = folder(name)
        for target in sorted(imports(path, package)):
            there = folder(target)
            if there != here and LAYERS[there] >= LAYERS[here]:
                found.append(f"{name} -> {target}")
    return found


def test_every_folder_is_a_layer():
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(LAYERS) - {""}


def test_layers_import_only_downwards():
    assert upward_imports() == []


def test_upward_and_sideways_imports_are_found(tmp_path):
    for name, text in {"core/io.py": "def f():\n    from ..serving import serve\n",
                       "pretraining/pretrain.py": "from ..finetuning.finetune import x\nfrom ..core import io\n",
                       "text/vocab.py": "import bertforge.cli\nfrom . import encoding\n",
                       "cli.py": "from .serving.serve import run\n"}.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    assert upward_imports(tmp_path) == ["bertforge.core.io -> bertforge.serving",
                                        "bertforge.pretraining.pretrain -> bertforge.finetuning.finetune",
                                        "bertforge.text.vocab -> bertforge.cli"]
