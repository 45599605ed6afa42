"""Rich output end to end: what a cell displays reaches a real jupyter_client as IPython
kernels send it (matplotlib figures, display updates, clear_output, DataFrames, _repr_*_
methods, images), and execute_reply metadata lists the workspace files a cell changed."""

import base64
import hashlib
import io

import pytest
from PIL import Image

from .itest_helpers import png_size, run

pytestmark = pytest.mark.default_preload  # it draws figures and compares what each kind of kernel shows

PLOT_TIMEOUT_S = 20  # the first figure of a kernel builds matplotlib's font cache


def b64_png_size(b64):
    return png_size(base64.b64decode(b64))


def displays(cell, msg_type="display_data"):
    return [m["content"] for m in cell.of_type(msg_type)]


def test_line_plot_is_a_png_of_the_figure_size(session):
    # No setup: the inline backend is the default, with its tight bounding box.
    cell = run(session, "import matplotlib.pyplot as plt\n"
                        "plt.figure(figsize=(4, 3), dpi=50)\n"
                        "plt.plot([1, 3, 2]);", timeout=PLOT_TIMEOUT_S)
    assert cell.content["status"] == "ok"
    assert cell.types == ["status", "execute_input", "display_data", "status"], cell.types
    (shown,) = displays(cell)
    assert sorted(shown["data"]) == ["image/png", "text/plain"]
    assert shown["data"]["text/plain"] == "<Figure size 200x150 with 1 Axes>"
    width, height = b64_png_size(shown["data"]["image/png"])
    assert 100 < width <= 200 and 75 < height <= 150, (width, height)
    # Without the tight box the PNG is exactly figsize * dpi.
    cell = run(session, "from matplotlib_inline.backend_inline import set_matplotlib_formats\n"
                        "set_matplotlib_formats('png', bbox_inches=None)\n"
                        "plt.figure(figsize=(4, 3), dpi=50)\n"
                        "plt.plot([1, 3, 2]);")
    (shown,) = displays(cell)
    assert b64_png_size(shown["data"]["image/png"]) == (200, 150)
    # Relayed byte-exact: the PNG that arrives is the one the kernel's formatter made.
    cell = run(session, "import base64, hashlib\n"
                        "fig = plt.figure(figsize=(2, 2), dpi=40); plt.plot([3, 1])\n"
                        "png = get_ipython().display_formatter.format(fig)[0]['image/png']\n"
                        "hashlib.sha256(base64.b64decode(png)).hexdigest()")
    (shown,) = displays(cell)
    assert cell.result == repr(hashlib.sha256(base64.b64decode(shown["data"]["image/png"]))
                               .hexdigest())
    # Shown figures are closed: nothing is left, and nothing is shown again.
    cell = run(session, "plt.get_fignums()")
    assert cell.result == "[]"
    assert displays(cell) == []


@pytest.mark.parametrize("kenneld", [["--spawner", "exec"], ["--preload", "numpy"]],
                         indirect=True)
def test_first_figure_of_a_cold_matplotlib_is_quiet(session):
    """A kernel that imports matplotlib itself (a cold start, or a zygote that did not
    preload it) lists the fonts with fc-list, which must find its configuration in the
    sandbox rather than complain on the cell's stderr."""
    cell = run(session, "import sys\n"
                        "cold = 'matplotlib' not in sys.modules\n"
                        "import matplotlib.pyplot as plt\n"
                        "plt.plot([1, 2])\n"
                        "cold", timeout=PLOT_TIMEOUT_S)
    assert cell.result == "True"
    assert [m["msg_type"] for m in cell.outputs] == ["execute_result", "display_data"]
    b64_png_size(displays(cell)[0]["data"]["image/png"])


def test_two_figures_in_order_and_show_mid_cell(session):
    cell = run(session, "import matplotlib.pyplot as plt\n"
                        "from matplotlib_inline.backend_inline import set_matplotlib_formats\n"
                        "set_matplotlib_formats('png', bbox_inches=None)\n"
                        "plt.figure(figsize=(2, 1), dpi=40); plt.plot([1, 2])\n"
                        "plt.figure(figsize=(3, 2), dpi=40); plt.plot([2, 1])\n"
                        "print('drawn')", timeout=PLOT_TIMEOUT_S)
    assert [m["msg_type"] for m in cell.outputs] == ["stream", "display_data", "display_data"]
    sizes = [b64_png_size(d["data"]["image/png"]) for d in displays(cell)]
    assert sizes == [(80, 40), (120, 80)]
    # plt.show() displays at once, before what the cell prints after it.
    cell = run(session, "plt.figure(figsize=(1, 1), dpi=30); plt.plot([1])\n"
                        "plt.show()\n"
                        "print('after show')\n"
                        "plt.figure(figsize=(2, 2), dpi=30); plt.plot([1]);")
    kinds = []
    for m in cell.outputs:  # a print may come as two stream messages ("after show", "\n")
        if kinds and m["msg_type"] == "stream" and kinds[-1][0] == "stream":
            kinds[-1] = ("stream", kinds[-1][1] + m["content"]["text"])
        else:
            kinds.append((m["msg_type"], m["content"].get("text")))
    assert kinds == [("display_data", None), ("stream", "after show\n"), ("display_data", None)]
    assert [b64_png_size(d["data"]["image/png"]) for d in displays(cell)] == [(30, 30), (60, 60)]


def test_display_update_and_clear_output(session):
    cell = run(session, "from IPython.display import display, update_display, clear_output\n"
                        "h = display('one', display_id=True)\n"
                        "h.update('two')\n"
                        "display('x', display_id='named')\n"
                        "update_display('y', display_id='named')\n"
                        "print('a'); clear_output(); print('b'); clear_output(wait=True)\n"
                        "h.display_id")
    assert cell.content["status"] == "ok"
    handle_id = cell.result.strip("'")
    assert len(handle_id) >= 16
    shown, updated = displays(cell), displays(cell, "update_display_data")
    assert [(d["transient"], d["data"]["text/plain"]) for d in shown] == [
        ({"display_id": handle_id}, "'one'"), ({"display_id": "named"}, "'x'")]
    assert [(d["transient"], d["data"]["text/plain"]) for d in updated] == [
        ({"display_id": handle_id}, "'two'"), ({"display_id": "named"}, "'y'")]
    order = [(m["msg_type"], m["content"].get("text", m["content"].get("wait")))
             for m in cell.outputs if m["msg_type"] in ("stream", "clear_output")]
    assert order == [("stream", "a\n"), ("clear_output", False), ("stream", "b\n"),
                     ("clear_output", True)]


def test_dataframe_result_is_an_html_table_and_text(session):
    cell = run(session, "import pandas as pd\n"
                        "pd.DataFrame({'city': ['Oslo', 'Lima'], 'temp': [4, 19]})",
               timeout=PLOT_TIMEOUT_S)
    (result,) = [m["content"] for m in cell.of_type("execute_result")]
    data = result["data"]
    assert sorted(data) == ["text/html", "text/plain"]
    assert "<table" in data["text/html"] and "<td>Lima</td>" in data["text/html"]
    assert data["text/plain"].split() == ["city", "temp", "0", "Oslo", "4", "1", "Lima", "19"]


def test_svg_repr(session):
    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4"/></svg>'
    cell = run(session, f"class Box:\n    def _repr_svg_(self):\n        return {svg!r}\nBox()")
    (result,) = [m["content"] for m in cell.of_type("execute_result")]
    assert result["data"]["image/svg+xml"] == svg
    assert result["data"]["text/plain"].startswith("<__main__.Box")


def _image_bytes(fmt, size, color):
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format=fmt)
    return out.getvalue()


def test_reprs_mime_types_and_image_metadata(session):
    jpeg, png = _image_bytes("JPEG", (8, 6), "red"), _image_bytes("PNG", (5, 3), "blue")
    pdf = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj <<>> endobj\n%%EOF\n"
    cell = run(session, f"""
from IPython.display import display, Markdown, Latex, JSON, Image
class Doc:
    def _repr_pdf_(self):
        return {pdf!r}
class Bundle:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return ({{'text/plain': 'bundle', 'text/html': '<i>bundle</i>',
                  'application/vnd.kennel.test+json': {{'k': [1, 2]}}}},
                {{'text/html': {{'isolated': True}}}})
display(Markdown('**bold**'), Latex(r'$x^2$'), JSON({{'a': [1, 2]}}))
display(Image(data={jpeg!r}, format='jpeg', width=80, height=60))
display(Image(data={png!r}, width=40))
display(Doc(), Bundle())
""")
    assert cell.content["status"] == "ok", cell.content
    shown = displays(cell)
    assert [sorted(set(d["data"]) - {"text/plain"}) for d in shown] == [
        ["text/markdown"], ["text/latex"], ["application/json"], ["image/jpeg"], ["image/png"],
        ["application/pdf"], ["application/vnd.kennel.test+json", "text/html"]]
    markdown, latex, js, jpg, pngd, doc, bundle = shown
    assert markdown["data"]["text/markdown"] == "**bold**"
    assert latex["data"]["text/latex"] == "$x^2$"
    assert js["data"]["application/json"] == {"a": [1, 2]}
    # Binary data arrives base64-encoded, byte-exact, with the size IPython was given.
    assert base64.b64decode(jpg["data"]["image/jpeg"]) == jpeg
    assert jpg["metadata"] == {"image/jpeg": {"width": 80, "height": 60}}
    assert base64.b64decode(pngd["data"]["image/png"]) == png
    assert pngd["metadata"] == {"image/png": {"width": 40}}
    assert base64.b64decode(doc["data"]["application/pdf"]) == pdf
    assert bundle["data"]["application/vnd.kennel.test+json"] == {"k": [1, 2]}
    assert bundle["data"]["text/plain"] == "bundle"
    assert bundle["metadata"] == {"text/html": {"isolated": True}}


def test_pil_image_shows_as_png(session):
    cell = run(session, "import PIL.Image\nPIL.Image.new('RGB', (7, 5), (0, 128, 255))")
    (result,) = [m["content"] for m in cell.of_type("execute_result")]
    assert b64_png_size(result["data"]["image/png"]) == (7, 5)
    image = Image.open(io.BytesIO(base64.b64decode(result["data"]["image/png"])))
    assert image.getpixel((3, 2)) == (0, 128, 255)


def test_figure_formats_and_dpi_are_configurable(session):
    setup = "import matplotlib.pyplot as plt\nplt.figure(figsize=(2, 1), dpi=50)\nplt.plot([1, 2]);"
    cell = run(session, "%config InlineBackend.figure_formats = ['svg']\n" + setup,
               timeout=PLOT_TIMEOUT_S)
    (shown,) = displays(cell)
    assert sorted(shown["data"]) == ["image/svg+xml", "text/plain"]
    assert shown["data"]["image/svg+xml"].lstrip().startswith("<?xml")
    # Several formats at once, and a dpi other than the figure's.
    cell = run(session, "from matplotlib_inline.backend_inline import set_matplotlib_formats\n"
                        "set_matplotlib_formats('png', 'jpeg', 'pdf', dpi=30, bbox_inches=None)\n"
                        + setup)
    (shown,) = displays(cell)
    data = shown["data"]
    assert sorted(data) == ["application/pdf", "image/jpeg", "image/png", "text/plain"]
    assert b64_png_size(data["image/png"]) == (60, 30)
    assert Image.open(io.BytesIO(base64.b64decode(data["image/jpeg"]))).size == (60, 30)
    assert base64.b64decode(data["application/pdf"]).startswith(b"%PDF")
    # Retina: twice the pixels, and the size to show it at in the metadata.
    cell = run(session, "set_matplotlib_formats('retina', bbox_inches=None)\n" + setup)
    (shown,) = displays(cell)
    assert b64_png_size(shown["data"]["image/png"]) == (200, 100)
    assert shown["metadata"] == {"image/png": {"width": 100, "height": 50}}


# -- files the cell changed, in execute_reply metadata -----------------------------------


def files_of(cell):
    md = cell.reply["metadata"]
    return md["files"], md["files_deleted"], md["files_truncated"]


def test_reply_lists_files_the_cell_wrote(session):
    cell = run(session, "import os\nos.makedirs('out/deep', exist_ok=True)\n"
                        "open('report.csv', 'w').write('a,b\\n1,2\\n')\n"
                        "open('out/deep/plot.bin', 'wb').write(bytes(1000))")
    assert cell.reply["metadata"]["outcome"] == "ok"  # kenneld's keys are there too
    assert files_of(cell) == ([{"name": "out/deep/plot.bin", "size": 1000},
                               {"name": "report.csv", "size": 8}], [], False)
    assert files_of(run(session, "x = 1")) == ([], [], False)
    # Rewritten at once with the same size: still seen (its mtime may not have moved).
    cell = run(session, "open('report.csv', 'w').write('c,d\\n3,4\\n')")
    assert files_of(cell) == ([{"name": "report.csv", "size": 8}], [], False)
    cell = run(session, "open('report.csv', 'a').write('5,6\\n'); os.remove('out/deep/plot.bin')")
    assert files_of(cell) == ([{"name": "report.csv", "size": 12}], ["out/deep/plot.bin"], False)
    # Hidden directories, caches and symlinks are not the cell's artefacts.
    cell = run(session, "os.makedirs('.cache', exist_ok=True); open('.cache/x', 'w').write('x')\n"
                        "os.makedirs('__pycache__', exist_ok=True)\n"
                        "open('__pycache__/m.pyc', 'w').write('x')\n"
                        "os.symlink('/etc/passwd', 'link')")
    assert files_of(cell) == ([], [], False)
    # A failed cell still says what it left behind.
    cell = run(session, "open('partial.txt', 'w').write('half'); 1 / 0")
    assert cell.content["status"] == "error"
    assert files_of(cell) == ([{"name": "partial.txt", "size": 4}], [], False)


@pytest.mark.timeout_s(60)
def test_a_large_workspace_is_watched_and_says_what_walks_would(session, kenneld, tmp_path):
    """Past 256 entries the kernel watches the workspace with inotify (kennel_files.Tracker)
    instead of walking it twice a cell: the same answers, in the real sandbox's workspace."""
    cell = run(session, "import os\nfor d in range(10):\n    os.makedirs(f'repo/p{d}')\n"
                        "    for f in range(30):\n"
                        "        open(f'repo/p{d}/m{f}.py', 'w').write('x')")
    files, deleted, truncated = files_of(cell)
    assert len(files) == 300 and deleted == [] and not truncated
    assert files_of(run(session, "x = 1")) == ([], [], False)
    # Watching now: the kernel (the cell's own process) holds an inotify descriptor.
    cell = run(session, "any(os.readlink(f'/proc/self/fd/{n}') == 'anon_inode:inotify'\n"
                        "    for n in os.listdir('/proc/self/fd') if n.isdigit()\n"
                        "    and os.path.exists(f'/proc/self/fd/{n}'))")
    assert cell.result == "True"
    cell = run(session, "open('repo/p3/m7.py', 'a').write('y'); os.remove('repo/p4/m0.py')\n"
                        "os.rename('repo/p5', 'repo/q5'); os.makedirs('out/a')\n"
                        "open('out/a/r.txt', 'w').write('r')")
    files, deleted, truncated = files_of(cell)
    names = [f["name"] for f in files]
    assert names == ["out/a/r.txt", "repo/p3/m7.py"] + sorted(f"repo/q5/m{i}.py"
                                                              for i in range(30))
    assert deleted == ["repo/p4/m0.py"] + sorted(f"repo/p5/m{i}.py" for i in range(30))
    assert not truncated
    # A file put between cells is not the next cell's; a change to it in a cell is.
    local = tmp_path / "in.txt"
    local.write_text("input")
    assert kenneld.cli("put", session.session_info["id"], str(local), "repo/in.txt").returncode == 0
    assert files_of(run(session, "x = 2")) == ([], [], False)
    cell = run(session, "open('repo/in.txt', 'a').write('!')")
    assert files_of(cell) == ([{"name": "repo/in.txt", "size": 6}], [], False)


def test_files_put_by_kenneld_are_not_the_cells(session, kenneld, tmp_path):
    local = tmp_path / "in.txt"
    local.write_text("input")
    name = session.session_info["id"]
    assert kenneld.cli("put", name, str(local), "in.txt").returncode == 0
    cell = run(session, "open('in.txt').read()")
    assert cell.result == "'input'"
    assert files_of(cell) == ([], [], False)


@pytest.mark.timeout_s(60)
def test_file_listing_is_bounded(session):
    cell = run(session, "import os\nos.mkdir('many')\n"
                        "for i in range(10050):\n"
                        "    open(f'many/f{i:05}', 'w').close()", timeout=40)
    files, deleted, truncated = files_of(cell)
    assert truncated is True
    assert len(files) == 1000 and deleted == []
    assert files == sorted(files, key=lambda f: f["name"])
    # Nothing changed: nothing listed, though the walk still stops at its bound.
    assert files_of(run(session, "pass")) == ([], [], True)
    cell = run(session, "open('new.txt', 'w').write('n')")
    assert files_of(cell) == ([{"name": "new.txt", "size": 1}], [], True)
