"""The runtime agents expect (docs/runtime.md), through a real kenneld and jupyter_client:
every package of issue #29 imports in a sandboxed session and does a small real thing; the
runtime digest is in kernel_info_reply and every execute_reply and is what `kennel runtime`
lists; `kenneld --site` and `--data` mount read-only directories; a ModuleNotFoundError says
what the runtime has instead."""

import hashlib
import json
import os
import subprocess

import pytest

from .itest_helpers import png_size, run, shell_reply
from .kenneld_proc import KENNELD

pytestmark = pytest.mark.default_preload  # what a session can import, as it runs by default

IMPORT_TIMEOUT_S = 90  # a new session importing the whole list, on a busy 2-core machine

# import name -> the Debian package that brings it (scripts/install-deps.sh)
PACKAGES = {
    "scipy": "python3-scipy", "sklearn": "python3-sklearn", "seaborn": "python3-seaborn",
    "statsmodels.api": "python3-statsmodels", "sympy": "python3-sympy",
    "networkx": "python3-networkx", "openpyxl": "python3-openpyxl", "xlrd": "python3-xlrd",
    "docx": "python3-docx", "pypdf": "python3-pypdf", "reportlab": "python3-reportlab",
    "bs4": "python3-bs4", "lxml.etree": "python3-lxml", "tabulate": "python3-tabulate",
    "PIL.Image": "python3-pil", "imageio": "python3-imageio", "skimage": "python3-skimage",
    "h5py": "python3-h5py", "xarray": "python3-xarray", "plotly": "python3-plotly",
    "nltk": "python3-nltk", "joblib": "python3-joblib", "jinja2": "python3-jinja2",
    "requests": "python3-requests", "dateutil": "python3-dateutil", "pytz": "python3-tz",
    "yaml": "python3-yaml",
}


def _ok(cell):
    assert cell.content["status"] == "ok", (cell.content.get("ename"),
                                            cell.content.get("evalue"), cell.stream("stderr"))
    return cell


@pytest.mark.timeout_s(IMPORT_TIMEOUT_S + 10)
def test_every_package_of_the_runtime_imports_in_a_session(session):
    code = ("import importlib, json\n"
            f"names = {sorted(PACKAGES)!r}\n"
            "failed = {}\n"
            "for n in names:\n"
            "    try:\n"
            "        importlib.import_module(n)\n"
            "    except Exception as e:\n"
            "        failed[n] = repr(e)\n"
            "print(json.dumps(failed))")
    cell = _ok(run(session, code, timeout=IMPORT_TIMEOUT_S))
    failed = json.loads(cell.stream("stdout"))
    assert failed == {}, {n: (PACKAGES[n], e) for n, e in failed.items()}
    # psutil says nothing on stderr at import, though the sandbox has no /proc/stat.
    assert cell.stream("stderr") == ""


def test_sklearn_and_seaborn_are_in_the_zygote_by_default(kenneld, session):
    """kenneld's default preload holds scikit-learn and seaborn (issue #29's `import sklearn,
    seaborn` within 150 ms of a new session: docs/runtime.md), so a new session has them
    imported before its first cell."""
    preload = kenneld.ok("stats_request")["spawner"]["preload"].split(",")
    assert {"numpy", "pandas", "matplotlib.pyplot", "sklearn", "seaborn"} <= set(preload)
    code = ("import sys\n"
            "print(sorted(m for m in ('sklearn', 'seaborn', 'sklearn.base') if m in sys.modules))")
    had = _ok(run(session, code)).stream("stdout").strip()
    assert had == "['seaborn', 'sklearn', 'sklearn.base']", had


@pytest.mark.timeout_s(IMPORT_TIMEOUT_S)
def test_small_real_uses(session):
    # scikit-learn fits, with joblib's process workers (n_jobs=2: loky's, which measure
    # their memory with psutil) inside the sandbox.
    cell = _ok(run(session, "from sklearn.linear_model import LogisticRegression\n"
                            "from sklearn.ensemble import RandomForestClassifier\n"
                            "X = [[0.0], [1.0], [2.0], [3.0]] * 5; y = [0, 0, 1, 1] * 5\n"
                            "m = LogisticRegression().fit(X, y)\n"
                            "f = RandomForestClassifier(n_estimators=8, n_jobs=2,\n"
                            "                           random_state=0).fit(X, y)\n"
                            "print(list(m.predict([[0.2], [2.8]])), list(f.predict([[3.0]])))",
                   timeout=IMPORT_TIMEOUT_S))
    assert cell.stream("stdout") == "[0, 1] [1]\n"
    assert cell.stream("stderr") == ""
    # seaborn draws through the inline backend: a PNG on iopub.
    cell = _ok(run(session, "import seaborn as sns\n"
                            "sns.barplot(x=['a', 'b'], y=[1, 2]);", timeout=IMPORT_TIMEOUT_S))
    (shown,) = [m["content"] for m in cell.of_type("display_data")]
    import base64
    width, height = png_size(base64.b64decode(shown["data"]["image/png"]))
    assert width > 100 and height > 100
    # openpyxl round trip in the workspace, through pandas too; the files are listed.
    cell = _ok(run(session, "import openpyxl, pandas as pd\n"
                            "wb = openpyxl.Workbook(); wb.active['A1'] = 42; wb.save('t.xlsx')\n"
                            "pd.DataFrame({'x': [1, 2]}).to_excel('d.xlsx', index=False)\n"
                            "print(openpyxl.load_workbook('t.xlsx').active['A1'].value,\n"
                            "      list(pd.read_excel('d.xlsx')['x']))"))
    assert cell.stream("stdout") == "42 [1, 2]\n"
    assert {"t.xlsx", "d.xlsx"} <= {f["name"] for f in cell.reply["metadata"]["files"]}
    # A PDF made by reportlab, read by pypdf; a .docx written and read; the rest briefly.
    cell = _ok(run(session, "from reportlab.pdfgen import canvas\n"
                            "c = canvas.Canvas('r.pdf'); c.drawString(72, 720, 'kennel pdf'); "
                            "c.save()\n"
                            "import pypdf, docx\n"
                            "d = docx.Document(); d.add_paragraph('kennel docx'); d.save('r.docx')\n"
                            "import sympy, networkx as nx, h5py, xarray as xr, nltk\n"
                            "import statsmodels.api as sm, bs4, tabulate, skimage.filters\n"
                            "import numpy as np\n"
                            "with h5py.File('/tmp/a.h5', 'w') as f: f['x'] = [1, 2]\n"
                            "print(pypdf.PdfReader('r.pdf').pages[0].extract_text().strip(),\n"
                            "      docx.Document('r.docx').paragraphs[0].text,\n"
                            "      sympy.solve(sympy.Symbol('x') ** 2 - 4),\n"
                            "      nx.shortest_path(nx.path_graph(4), 0, 3),\n"
                            "      list(h5py.File('/tmp/a.h5')['x'][:]),\n"
                            "      float(xr.DataArray([1, 2, 3]).mean()),\n"
                            "      nltk.tokenize.wordpunct_tokenize('no data needed.'),\n"
                            "      round(sm.OLS([1, 2, 3], [[1, 1], [1, 2], [1, 3]]).fit()"
                            ".params[1], 6),\n"
                            "      bs4.BeautifulSoup('<p>soup</p>', 'lxml').p.text,\n"
                            "      tabulate.tabulate([[1, 2]], tablefmt='plain'),\n"
                            "      skimage.filters.sobel(np.eye(4)).shape)",
                   timeout=IMPORT_TIMEOUT_S))
    assert cell.stream("stdout") == (
        "kennel pdf kennel docx [-2, 2] [0, 1, 2, 3] [1, 2] 2.0 "
        "['no', 'data', 'needed', '.'] 1.0 soup 1  2 (4, 4)\n")
    # requests imports, and the network stays off.
    cell = run(session, "import requests\n"
                        "requests.get('http://93.184.216.34/', timeout=2)")
    assert cell.content["status"] == "error"
    assert cell.content["ename"] == "ConnectionError", cell.content["evalue"]


def test_psutil_per_process_calls_work_in_the_kernel_and_its_pythons(session):
    # The sandbox's /proc has no /proc/stat, where psutil reads the boot time; the kernel
    # and the Pythons it starts (sandbox_site's sitecustomize) take it from the clocks.
    probe = ("import psutil, time; p = psutil.Process(); "
             "print(abs(p.create_time() - time.time()) < 600, p.memory_info().rss > 0)")
    cell = _ok(run(session, probe + "\n"
                            "import subprocess, sys\n"
                            f"out = subprocess.run([sys.executable, '-c', {probe!r}],\n"
                            "                     capture_output=True, text=True)\n"
                            "print(out.stdout, out.stderr, sep='', end='')"))
    assert cell.stream("stdout") == "True True\nTrue True\n"
    assert cell.stream("stderr") == ""


def _digest_of(listing):
    """The digest as docs/runtime.md defines it, from `kennel runtime --json`."""
    text = "".join(f"{p['name']}={p['version']}\n" for p in listing["packages"])
    text += "python=" + listing["python"] + "\n"
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def test_digest_in_kernel_info_and_execute_replies_is_kennel_runtimes(kenneld, session):
    msg_id = session.kernel_info()
    info = shell_reply(session, msg_id)["content"]
    digest = info["runtime_digest"]
    assert digest.startswith("sha256:") and len(digest) == 7 + 64
    cell = run(session, "1 + 1")
    assert cell.reply["metadata"]["runtime_digest"] == digest
    cell = run(session, "1 / 0")  # a failed cell's reply carries it too
    assert cell.content["status"] == "error"
    assert cell.reply["metadata"]["runtime_digest"] == digest
    listed = kenneld.cli("runtime", "--json")
    assert listed.returncode == 0, listed.stderr
    listing = json.loads(listed.stdout)
    assert listing["digest"] == digest == _digest_of(listing)
    names = {p["name"]: p["version"] for p in listing["packages"]}
    for name in ("scikit-learn", "seaborn", "statsmodels", "openpyxl", "numpy", "pandas"):
        assert name in names, name
    # The listing is sorted and the plain form says the same.
    assert [p["name"] for p in listing["packages"]] == sorted(names)
    plain = kenneld.cli("runtime")
    assert plain.returncode == 0, plain.stderr
    assert f"digest  {digest}" in plain.stdout
    assert any(line.split() == ["scikit-learn", names["scikit-learn"]]
               for line in plain.stdout.splitlines())


@pytest.mark.parametrize("module, said", [
    ("scikit_learn", "scikit-learn is imported as sklearn"),
    ("beautifulsoup4", "beautifulsoup4 is imported as bs4"),
    ("cv2", "OpenCV (cv2) is not installed; for images the runtime has skimage "
            "(scikit-image), PIL (pillow) and imageio"),
    ("pandsa", "did you mean pandas?"),
    ("Numpy", "did you mean numpy?"),
])
def test_a_missing_module_says_what_the_runtime_has_instead(session, module, said):
    cell = run(session, f"import {module}")
    assert cell.content["ename"] == "ModuleNotFoundError"
    assert cell.content["evalue"] == f"No module named '{module}' (kennel: {said})"
    (error,) = [m["content"] for m in cell.of_type("error")]
    assert said in error["traceback"][-1]


def test_a_missing_module_with_nothing_close_is_left_as_python_says(session):
    cell = run(session, "import zzqqxx_nothing_like_it")
    assert cell.content["evalue"] == "No module named 'zzqqxx_nothing_like_it'"
    # A submodule that does not exist of a package that does: nothing better to say.
    cell = run(session, "import numpy.no_such_part")
    assert cell.content["evalue"] == "No module named 'numpy.no_such_part'"


def _site_and_data(tmp_path):
    """A site-packages with a module and a distribution's metadata, and a dataset; readable
    by others, as kernels run as unprivileged host uids, and writable by others too, so that
    only the read-only mount stops a kernel's writes."""
    root = tmp_path / "ops"
    site = root / "site"
    (site / "kennel_probe-1.2.dist-info").mkdir(parents=True)
    (site / "kennel_probe-1.2.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: kennel-probe\nVersion: 1.2\n\n")
    (site / "kennel_probe.py").write_text("ANSWER = 42\n")
    data = root / "iris"
    data.mkdir()
    (data / "iris.csv").write_text("sepal,petal\n5.1,1.4\n")
    for d in (tmp_path, root):
        d.chmod(0o755)
    for d in (site, site / "kennel_probe-1.2.dist-info", data):
        d.chmod(0o777)
    for f in (site / "kennel_probe.py", data / "iris.csv",
              site / "kennel_probe-1.2.dist-info" / "METADATA"):
        f.chmod(0o666)
    return site, data


@pytest.mark.timeout_s(60)
@pytest.mark.parametrize("spawner", ["zygote", "exec"])
def test_site_and_data_are_mounted_read_only(start_kenneld, connect, tmp_path, spawner):
    site, data = _site_and_data(tmp_path)
    k = start_kenneld(args=["--spawner", spawner, "--site", str(site),
                            "--data", f"iris={data}", "--pool", "0"])
    kc = connect(k.create()["connection_file"])
    cell = _ok(run(kc, "import kennel_probe, sys\n"
                       "print(kennel_probe.ANSWER, kennel_probe.__file__, sys.path[-1])\n"
                       "print(open('/data/iris/iris.csv').read(), end='')"))
    assert cell.stream("stdout") == ("42 /opt/site/kennel_probe.py /opt/site\n"
                                     "sepal,petal\n5.1,1.4\n")
    for target in ("/data/iris/new.csv", "/data/iris/iris.csv", "/opt/site/kennel_probe.py",
                   "/data/other"):
        cell = run(kc, f"open({target!r}, 'a')")
        assert cell.content["ename"] == "OSError", (target, cell.content)
        assert "[Errno 30] Read-only file system" in cell.content["evalue"], (target, cell.content)
    assert (data / "iris.csv").read_text() == "sepal,petal\n5.1,1.4\n"
    assert sorted(os.listdir(data)) == ["iris.csv"]
    # The site's distribution is in the digest, and `kennel runtime` lists it.
    info = shell_reply(kc, kc.kernel_info())["content"]
    listing = json.loads(k.cli("runtime", "--json").stdout)
    assert {"name": "kennel-probe", "version": "1.2"} in listing["packages"]
    assert info["runtime_digest"] == listing["digest"] == _digest_of(listing)


def _kenneld_refuses(tmp_path, *args):
    proc = subprocess.run([str(KENNELD), "--state-dir", str(tmp_path / "state"), *args],
                          capture_output=True, text=True, timeout=10)
    assert proc.returncode != 0, proc
    return proc.stderr


def test_site_and_data_arguments_are_checked(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    assert "--site must be an existing directory" in _kenneld_refuses(tmp_path, "--site", "rel")
    assert "--site must be an existing directory" in _kenneld_refuses(
        tmp_path, "--site", str(tmp_path / "missing"))
    for bad in ("noequals", "=" + str(d), "a/b=" + str(d), ".hidden=" + str(d),
                "x" * 65 + "=" + str(d)):
        assert "--data takes NAME=DIR" in _kenneld_refuses(tmp_path, "--data", bad), bad
    assert "given twice" in _kenneld_refuses(tmp_path, "--data", f"a={d}", "--data", f"a={d}")
    assert "--data's DIR must be" in _kenneld_refuses(tmp_path, "--data", "a=" + str(d / "no"))
    assert "leaves out" in _kenneld_refuses(tmp_path, "--insecure-no-sandbox", "--site", str(d))


def test_at_most_16_datasets(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    many = [a for i in range(17) for a in ("--data", f"set{i}={d}")]
    assert "at most 16 --data" in _kenneld_refuses(tmp_path, *many)
