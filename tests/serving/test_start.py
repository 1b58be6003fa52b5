"""`bertforge serve` stops before it listens, with a one-line error, where it could never answer (serve_start.py)."""

import os
import re
import socket
import subprocess
import sys

import pytest

from bertforge.cli import main
from tests.conftest import REPO
from tests.serving.test_serve import free_port
from tests.serving.test_guard import classifier  # noqa: F401 (a fixture)


def fails_to_start(folder, *flags, port=None) -> str:
    """The one-line error of `bertforge serve FOLDER` that exits before listening (on a free port by default)."""
    port = port or free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "bertforge", "serve", str(folder), "--port", str(port),
                           *map(str, flags)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    error = done.stderr.strip()
    assert re.match(r"bertforge( serve)?: error: ", error) and "\n" not in error, error
    return error


def copy(folder, to, leave_out=()):
    to.mkdir()
    for file in folder.iterdir():
        if file.name not in leave_out:
            (to / file.name).write_bytes(file.read_bytes())
    return to


def test_a_folder_without_weights(classifier, tmp_path):  # noqa: F811
    error = fails_to_start(copy(classifier, tmp_path / "m", {"model.safetensors"}))
    assert "no model.safetensors (or pytorch_model.bin)" in error


def test_a_folder_with_only_pickled_weights(classifier, tmp_path):  # noqa: F811
    folder = copy(classifier, tmp_path / "m", {"model.safetensors"})
    (folder / "pytorch_model.bin").write_bytes(b"pickle")
    assert "pytorch_model.bin: pickle files can run code" in fails_to_start(folder)


def test_onnx_without_model_onnx(classifier):  # noqa: F811
    assert "model.onnx: no such file" in fails_to_start(classifier, "--backend", "onnx")


def test_a_folder_without_a_vocabulary(classifier, tmp_path):  # noqa: F811
    folder = copy(classifier, tmp_path / "m", {"vocab.txt", "tokenizer.json"})
    assert "vocab.txt: vocabulary file not found" in fails_to_start(folder)


def test_a_port_in_use(classifier):  # noqa: F811
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert f"--port {port}: in use on 127.0.0.1" in fails_to_start(classifier, port=port)


@pytest.mark.parametrize("host", ["nowhere.invalid", "192.0.2.1"])
def test_an_address_this_machine_does_not_have(classifier, host):  # noqa: F811
    assert f"--host {host}" in fails_to_start(classifier, "--host", host)


@pytest.mark.parametrize("flags, env, message", [
    (["--api-key-file", "missing.key"], None, "missing.key"),
    ([], " ", "BERTFORGE_API_KEY: the API key must be one or more printable ASCII characters"),
    (["--api-key", "two words"], None, "argument --api-key: must be one or more printable ASCII characters"),
    (["--api-key", "a", "--api-key-file", "f"], None, "not allowed with argument"),
    (["--allowed-hosts", "http://x"], None, "argument --allowed-hosts: expected host names"),
    (["--allowed-hosts", "localhost,0.0.0.0"], None, "--allowed-hosts 0.0.0.0: an address to listen on (every "
                                                     "interface), not a name a client reaches this server by"),
    (["--allowed-hosts", "[::]"], None, "--allowed-hosts ::: an address to listen on"),
])
def test_a_bad_api_key_or_host_list(classifier, tmp_path, monkeypatch, flags, env, message):  # noqa: F811
    if env is not None:
        monkeypatch.setenv("BERTFORGE_API_KEY", env)
    monkeypatch.chdir(tmp_path)
    assert message in fails_to_start(classifier, *flags)


def test_the_api_key_flag_says_it_shows_in_the_process_list(capsys):
    """--api-key's value is in the process list for every user of the machine: its help says so and names the
    ways that keep it out; the default is said once."""
    assert main(["serve", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    help_text = text[text.index("--api-key KEY every request"):text.index("--api-key-file FILE --api-key")]
    assert "visible to every user of this machine in the process list (ps)" in help_text, help_text
    assert "--api-key-file or BERTFORGE_API_KEY keeps it out" in help_text, help_text
    assert help_text.count("default") == 1, help_text
