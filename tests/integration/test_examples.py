"""The scripts in examples/, run as a user would, against the test's kenneld."""

import json
import subprocess

import pytest

from .itest_helpers import png_size, wait_for
from .kenneld_proc import KENNEL, PYTHON, ROOT

pytestmark = pytest.mark.default_preload  # the examples, as a user runs them

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


AGENT_LOOP = ROOT / "examples" / "agent_loop.py"
CSV_REPORT = ROOT / "examples" / "csv_report.py"


def _run_script(script, *args):
    return subprocess.run([PYTHON, str(script), *args], capture_output=True, text=True,
                          timeout=EXAMPLE_TIMEOUT_S)


@pytest.mark.timeout_s(EXAMPLE_TIMEOUT_S + 10)
def test_agent_loop_fixes_its_bug_on_the_second_try(kenneld):
    r = _run_script(AGENT_LOOP, "--state-dir", str(kenneld.state_dir))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] and out["answer"] == "1.62"  # round(1.625, 2): a float's nearest
    assert out["stopped"] == "answered"
    first, second = out["attempts"]
    assert first["outcome"] == "error" and first["error"] == "KeyError: 'cost'"
    assert second["outcome"] == "ok" and second["result"] == "1.62" and second["error"] is None
    wait_for(lambda: kenneld.sessions() == [], what="the example's session to end")


@pytest.mark.timeout_s(EXAMPLE_TIMEOUT_S + 10)
def test_agent_loop_gives_up_after_three_retries(kenneld):
    r = _run_script(AGENT_LOOP, "--state-dir", str(kenneld.state_dir), "--never-fix")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert not out["ok"] and out["answer"] is None and out["stopped"] == "retries"
    assert [a["outcome"] for a in out["attempts"]] == ["error"] * 4  # the try and 3 retries
    wait_for(lambda: kenneld.sessions() == [], what="the example's session to end")


@pytest.mark.timeout_s(EXAMPLE_TIMEOUT_S + 10)
def test_agent_loop_stops_at_its_budget(kenneld):
    r = _run_script(AGENT_LOOP, "--state-dir", str(kenneld.state_dir), "--budget", "0")
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert out["attempts"] == [] and out["stopped"] == "budget"


@pytest.mark.timeout_s(EXAMPLE_TIMEOUT_S + 10)
def test_csv_report_cleans_plots_and_downloads(kenneld, tmp_path):
    raw = tmp_path / "raw.csv"
    raw.write_text(" Date , Amount ,note\n"
                   "2026-01-05,10.5,a\n"
                   "2026-01-05,10.5,a\n"        # a duplicate
                   "2026-02-01,n/a,b\n"         # no amount
                   "not a date,3,c\n"           # no date
                   "2026-02-10,4,d\n"
                   "2026-01-20,1.5,e\n")
    out = tmp_path / "out"
    r = _run_script(CSV_REPORT, "--state-dir", str(kenneld.state_dir), str(raw), str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"wrote {out / 'clean.csv'}\nwrote {out / 'report.png'}\n"
                        "rows: 6 in, 3 clean; total 16.00\n")
    assert (out / "clean.csv").read_text() == ("date,amount,note\n2026-01-05,10.5,a\n"
                                               "2026-01-20,1.5,e\n2026-02-10,4.0,d\n")
    width, height = png_size((out / "report.png").read_bytes())
    assert (width, height) == (600, 400)
    wait_for(lambda: kenneld.sessions() == [], what="the example's session to end")
