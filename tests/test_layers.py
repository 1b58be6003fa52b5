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


def forwarded_imports(package: Path = PACKAGE) -> list[str]:
    """Imports inside the package of an old path that moved.py forwards: a module that no file is now."""
    from bertforge.moved import MOVED

    found = []
    for path in sorted(package.rglob("*.py")):
        here = ("bertforge",) + path.relative_to(package).with_suffix("").parts[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = ".".join((list(here[:len(here) - node.level + 1]) if node.level else [])
                                + ([node.module] if node.module else []))
                named = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                named = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            found += [f"{module_name(path, package)} -> {name}" for name in named if name.startswith("bertforge.")
                      and name.removeprefix("bertforge.") in MOVED and not exists(name, package)]
    return found


def exists(module: str, package: Path) -> bool:
    path = package.joinpath(*module.split(".")[1:])
    return path.with_suffix(".py").is_file() or path.is_dir()


def test_the_package_imports_no_old_path():
    assert forwarded_imports() == []


def test_an_old_path_imported_is_found(tmp_path):
    (tmp_path / "commands").mkdir()
    (tmp_path / "model" / "formats").mkdir(parents=True)
    (tmp_path / "model" / "formats" / "google_checkpoint.py").write_text("")
    (tmp_path / "commands" / "info.py").write_text("import io\n\ndef f():\n    from ..model import google_checkpoint\n"
                                                   "    from ..model.formats import google_checkpoint\n")
    assert forwarded_imports(tmp_path) == ["bertforge.commands.info -> bertforge.model.google_checkpoint"]


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


def stale_names(path: Path, package: Path) -> list[str]:
    """Module names in `path`'s text that no longer exist: a module from before the layers' folders
    (bertforge/moved.py's MOVED, as `serve_tei.py` or `serve_guard.Guard`) that no file is named now, and a name
    under `inference.` that is none of that folder's modules (the old inference.py's, now in inference.batches)."""
    import re

    from bertforge.moved import MOVED

    now = {p.stem for p in package.rglob("*.py")} | {p.name for p in package.iterdir() if p.is_dir()}
    gone = sorted(old for old in set(MOVED) - now if "." not in old)
    # a module moved within a folder (model.config, now model/architectures/config.py): named by its path, or
    # in full (bertforge.model.config), where no such file or folder is now
    moved_within = sorted(old for old in MOVED if "." in old and not (package / old.replace(".", "/")).exists()
                          and not (package / old.replace(".", "/")).with_suffix(".py").exists())
    paths = "|".join(rf"{old.replace('.', '/')}\.py|bertforge\.{re.escape(old)}\b" for old in moved_within)
    stale = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        stale += [f"{path.name}:{i}: {name}" for name in re.findall(rf"\b(?:{'|'.join(gone)})\.\w+", line)
                  if not name.endswith(".py") or name.removesuffix(".py") not in now]
        stale += [f"{path.name}:{i}: {name}" for name in re.findall(rf"(?<![\w/.])(?:{paths})", line)]
        stale += [f"{path.name}:{i}: inference.{name}" for name in re.findall(r"\binference\.(\w+)", line)
                  if not (package / "inference" / f"{name}.py").exists()]
    return stale


def test_docstrings_and_comments_name_modules_that_exist():
    stale = [s for path in sorted(PACKAGE.rglob("*.py")) if path.name != "moved.py" for s in stale_names(path, PACKAGE)]
    assert not stale, stale
