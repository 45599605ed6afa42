"""nbclient runs notebooks on kennel (through the kernelspec launcher) and on the real
ipykernel: data/sample.ipynb's outputs must match cell by cell; data/plots.ipynb (figures, a
DataFrame, an SVG repr, a display update, clear_output) must give the same MIME types in
the same order."""

import json
import shutil
import tempfile
from pathlib import Path

import nbclient
import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from traitlets.config import Config

from .kenneld_proc import KENNEL, PYTHON

pytestmark = pytest.mark.default_preload  # a notebook's outputs against ipykernel's

DATA = Path(__file__).parent / "data"


@pytest.fixture
def jupyter_env(kenneld, tmp_path, monkeypatch):
    """A private JUPYTER_PATH with the kennel kernelspec and a python3 (ipykernel) one
    that runs /usr/bin/python3, whatever else is installed."""
    prefix = tmp_path / "prefix"
    r = kenneld.cli("kernelspec", "install", "--prefix", str(prefix))
    assert r.returncode == 0, r.stderr
    share = prefix / "share" / "jupyter"
    spec = json.loads((share / "kernels" / "kennel" / "kernel.json").read_text())
    assert spec["argv"][-3:] == ["kernel", "-f", "{connection_file}"]
    py3 = share / "kernels" / "python3"
    py3.mkdir(parents=True)
    (py3 / "kernel.json").write_text(json.dumps({
        "argv": [PYTHON, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python",
        "env": {"PYDEVD_DISABLE_FILE_VALIDATION": "1"},
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(share))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    specs = KernelSpecManager()
    assert specs.get_kernel_spec("python3").argv[0] == PYTHON
    assert specs.get_kernel_spec("kennel").argv[0] == str(KENNEL)
    return share


def _execute(kernel_name, notebook="sample.ipynb"):
    """Runs the notebook on kernel_name. The reference ipykernel talks over ipc:// sockets
    in a short private directory: jupyter_client picks free TCP ports, lets go of them and
    lets the kernel bind them later, and a kenneld of the suite running beside this one
    could take one in between (seen in CI as ipykernel's "Address already in use")."""
    nb = nbformat.read(DATA / notebook, as_version=4)
    options = dict(kernel_name=kernel_name, timeout=30, allow_errors=True, startup_timeout=20)
    if kernel_name != "python3":
        return nbclient.NotebookClient(nb, **options).execute()
    sockets = tempfile.mkdtemp(prefix="kennel-nb-", dir="/tmp")
    try:
        config = Config({"KernelManager": {"transport": "ipc", "ip": sockets + "/k"}})
        return nbclient.NotebookClient(nb, config=config, **options).execute()
    finally:
        shutil.rmtree(sockets, ignore_errors=True)


def _summary(output):
    kind = output["output_type"]
    if kind == "stream":
        return (kind, output["name"], output["text"])
    if kind == "execute_result":
        return (kind, sorted(output["data"]), output["data"]["text/plain"])
    if kind == "display_data":
        return (kind, sorted(output["data"]), output["data"].get("text/html"))
    if kind == "error":
        return (kind, output["ename"], output["evalue"])
    return (kind,)


def _cells(nb):
    return [(c["execution_count"], [_summary(o) for o in c["outputs"]])
            for c in nb.cells if c["cell_type"] == "code"]


@pytest.mark.quiet
@pytest.mark.timeout_s(60)
def test_notebook_matches_ipykernel(kenneld, jupyter_env):
    kennel = _cells(_execute("kennel"))
    assert kenneld.sessions() == []  # nbclient shut the launched session down
    assert kennel == [
        (1, [("stream", "stdout", "hello from the notebook\n")]),
        (2, [("execute_result", ["text/plain"], "42")]),
        (3, [("stream", "stdout", "y is 22\n"), ("execute_result", ["text/plain"], "22")]),
        (4, [("stream", "stderr", "a warning\n")]),
        (5, [("display_data", ["text/html", "text/plain"], "<b>bold</b>")]),
        (6, [("error", "ZeroDivisionError", "division by zero")]),
    ]
    reference = _cells(_execute("python3"))
    assert kennel == reference


def _mime_types(output):
    kind = output["output_type"]
    if kind == "stream":
        return (kind, output["name"])
    if kind == "error":
        return (kind, output["ename"])
    return (kind, sorted(output.get("data", {})))


PNG = ["image/png", "text/plain"]


@pytest.mark.timeout_s(90)
def test_plots_notebook_has_ipykernels_mime_types(kenneld, jupyter_env):
    nb = _execute("kennel", "plots.ipynb")
    kennel = [[_mime_types(o) for o in c["outputs"]] for c in nb.cells if c["cell_type"] == "code"]
    assert kennel == [
        [("display_data", PNG)],
        [("execute_result", ["text/html", "text/plain"])],
        [("execute_result", ["image/svg+xml", "text/plain"])],
        [("display_data", ["text/html", "text/plain"])],
        [("display_data", PNG), ("stream", "stdout"), ("display_data", PNG)],
        [("display_data", ["text/markdown", "text/plain"]),
         ("display_data", ["application/json", "text/plain"])],
    ]
    cells = [c for c in nb.cells if c["cell_type"] == "code"]
    assert cells[3]["outputs"][0]["data"]["text/html"] == "<b>done</b>"  # updated in place
    assert "<table" in cells[1]["outputs"][0]["data"]["text/html"]
    reference = _execute("python3", "plots.ipynb")
    assert kennel == [[_mime_types(o) for o in c["outputs"]]
                      for c in reference.cells if c["cell_type"] == "code"]
