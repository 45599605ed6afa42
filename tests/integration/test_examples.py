"""The scripts in examples/, run as a user would, against the test's kenneld."""

import subprocess

import pytest

from .itest_helpers import png_size, wait_for
from .kenneld_proc import KENNEL, PYTHON, ROOT

PLOT_PNG = ROOT / "examples" / "plot_png.py"
EXAMPLE_TIMEOUT_S = 60


def _run_example(*args):
    return subprocess.run([PYTHON, str(PLOT_PNG), *args, "--kennel", str(KENNEL)],
                          capture_output=True, text=True, timeout=EXAMPLE_TIMEOUT_S)


@pytest.mark.timeout_s(EXAMPLE_TIMEOUT_S + 10)
def test_plot_png_in_a_new_session(kenneld, tmp_path):
    out = tmp_path / "plot.png"
    r = _run_example("--state-dir", str(kenneld.state_dir), str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"wrote {out} ({out.stat().st_size} bytes)\n"
    width, height = png_size(out.read_bytes())
    # figsize (6, 4) at 100 dpi, trimmed to the drawing by the inline backend's tight box
    assert 400 < width <= 600 and 250 < height <= 400, (width, height)
    # The session the example made, it ended.
    wait_for(lambda: kenneld.sessions() == [], what="the example's session to end")


@pytest.mark.timeout_s(EXAMPLE_TIMEOUT_S + 10)
def test_plot_png_in_an_existing_session(kenneld, tmp_path):
    info = kenneld.create("mine")
    out = tmp_path / "plot.png"
    r = _run_example("--connection-file", info["connection_file"], str(out))
    assert r.returncode == 0, r.stderr
    png_size(out.read_bytes())
    assert [s["name"] for s in kenneld.sessions()] == ["mine"]  # not the example's to end
    r = kenneld.cli("exec", "mine", "plt.get_fignums(), round(float(np.sin(np.pi / 2)))")
    assert r.stdout == "([], 1)\n"  # the example's cell ran there, and its figure was closed
