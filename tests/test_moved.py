"""The import paths from before the modules moved into their layers' folders (bertforge/moved.py): every public
name an old module defined (moved_names.json, read from the old files once) is at its old path the very object it
is now, each old module warns once with its new path, and a name no module has now says it is gone."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bertforge import moved

NAMES = json.loads(Path(__file__).with_name("moved_names.json").read_text())
MOVED, GONE = NAMES["moved"], NAMES["gone"]  # old module -> {module now: [names]}; old module -> [names]


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[1])


def test_the_table_covers_every_old_module_and_name():
    assert sorted(MOVED) == sorted(f"bertforge.{old}" for old in moved.MOVED)
    assert {f"bertforge.{old}": sorted(names) for old, names in moved.GONE.items()} == \
        {old: sorted(names) for old, names in GONE.items()}
    for old, names in moved.PACKAGES.items():
        assert sorted(names.split()) == sorted(n for group in MOVED[f"bertforge.{old}"].values() for n in group)


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("old", MOVED)
def test_an_old_path_gives_the_very_object(old):
    module = importlib.import_module(old)
    for new, names in MOVED[old].items():
        for name in names:
            assert getattr(module, name) is getattr(importlib.import_module(new), name), f"{old}.{name}"


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_a_name_that_is_gone_says_so():
    for old, names in GONE.items():
        for name in names:
            with pytest.raises(AttributeError, match=rf"^{old}\.{name} is gone: "):
                getattr(importlib.import_module(old), name)
    with pytest.raises(AttributeError, match="module 'bertforge.tokenizer' has no attribute 'NoSuchThing'"):
        importlib.import_module("bertforge.tokenizer").NoSuchThing
    with pytest.raises(AttributeError, match="module 'bertforge.model' has no attribute 'NoSuchThing'"):
        importlib.import_module("bertforge.model").NoSuchThing
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("bertforge.no_such_module")


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_star_imports_and_submodules_still_work():
    namespace = {}
    exec("from bertforge.options import *", namespace)
    assert namespace["count"] is importlib.import_module("bertforge.core.flags").count
    assert namespace["TrainArgs"] is importlib.import_module("bertforge.training.options").TrainArgs
    exec("from bertforge.model import sentence_folder", namespace)  # a submodule, not an old name of model.py
    assert namespace["sentence_folder"].__name__ == "bertforge.model.sentence_folder"


def test_each_old_module_warns_once_naming_its_new_path():
    done = run_python(f"""
import importlib, json, sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    import bertforge.train, bertforge.model
    assert 'torch' not in sys.modules, 'an old path imported its new module before use'
    for old, groups in json.load(open({str(Path(__file__).with_name("moved_names.json"))!r}))["moved"].items():
        for _ in range(2):
            module = importlib.import_module(old)
            for names in groups.values():
                for name in names:
                    getattr(module, name)
print(json.dumps([str(w.message) for w in caught if w.category is FutureWarning]))
""")
    assert done.returncode == 0, done.stderr
    warned = json.loads(done.stdout)
    for old, groups in MOVED.items():
        # its own warning: "OLD is now ...", or for a package "OLD.NAME is now ... (the old module OLD is now ...)"
        mine = [message for message in warned
                if message.startswith(f"{old} is now") or f"(the old module {old} is now" in message]
        now = next(iter(groups))  # the module the old one became
        assert len(mine) == 1 and now in mine[0], f"{old}: {mine}"
        assert mine[0].endswith("; the old path goes in a later release")
    assert len(warned) == len(MOVED)


def test_old_scripts_run_and_are_told_where_the_names_went():
    done = run_python("import bertforge.model as M\n"
                      "a = M.BertForMaskedLM\n"
                      "import bertforge.inference\n"
                      "b = bertforge.inference.run\n"
                      "from bertforge.tokenizer import BertTokenizer\n"
                      "import bertforge.model.architectures.bert, bertforge.inference.batches\n"
                      "import bertforge.text.tokenizer\n"
                      "print(a is bertforge.model.architectures.bert.BertForMaskedLM,\n"
                      "      b is bertforge.inference.batches.run,\n"
                      "      BertTokenizer is bertforge.text.tokenizer.BertTokenizer)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"] * 3
    warned = [line for line in done.stderr.splitlines() if "FutureWarning" in line]  # shown by default
    assert warned == [
        "<string>:2: FutureWarning: bertforge.model.BertForMaskedLM is now "
        "bertforge.model.architectures.bert.BertForMaskedLM (the old module bertforge.model is now "
        "bertforge.model.architectures.bert and bertforge.model.architectures.task_heads); "
        "the old path goes in a later release",
        "<string>:4: FutureWarning: bertforge.inference.run is now bertforge.inference.batches.run (the old module "
        "bertforge.inference is now bertforge.inference.batches); the old path goes in a later release",
        "<string>:5: FutureWarning: bertforge.tokenizer is now bertforge.text.tokenizer; "
        "the old path goes in a later release"], done.stderr
