"""ipywidgets and tqdm's notebook bar in Debian's Notebook 6.4, in a headless Chromium driven
by tests/browser/ (playwright-core), with a kennel kernel: a slider is displayed, moved with
the keyboard on the page, and a kernel-side observer sees the value; tqdm.notebook draws its
bar. Notebook loads the widgets' JavaScript as Debian enables it (python3-widgetsnbextension's
jupyter-nbextension-jupyter-js-widgets, in /etc/jupyter/nbconfig), with this test's own
Jupyter directories under tmp_path."""

import pytest

from .test_notebook_browser import _drive, _notebook_file, notebook_server  # noqa: F401

SLIDER = ".widget-hslider"
TQDM = ".widget-hbox:has(.widget-hprogress)"  # tqdm's bar: its texts around a progress bar

WIDGET_STEPS = [
    {"run": "import ipywidgets\n"
            "s = ipywidgets.IntSlider(value=3, min=0, max=10, description='n')\n"
            "seen = []\n"
            "s.observe(lambda change: seen.append(change['new']), names='value')\n"
            "display(s)"},
    {"read": f"{SLIDER} .widget-readout"},
    # Four presses of the right arrow on the slider's handle, as a user who tabbed to it.
    {"press": ["ArrowRight"] * 4, "on": f"{SLIDER} .ui-slider-handle"},
    {"read": f"{SLIDER} .widget-readout"},
    {"idle": True},
    {"run": "s.value, seen[-1]"},
    # The kernel moves it back: the page follows.
    {"run": "s.value = 2"},
    {"read": f"{SLIDER} .widget-readout"},
    {"run": "from tqdm.notebook import tqdm\n"
            "import time\n"
            "for i in tqdm(range(5), desc='steps'):\n"
            "    time.sleep(0.05)"},
    {"read": f"{TQDM} .progress-bar"},
    {"read": TQDM},
    {"idle": True},
]


@pytest.mark.timeout_s(60)
def test_a_slider_moved_on_the_page_is_seen_by_the_kernel_and_tqdm_draws_its_bar(
        kenneld, notebook_server, tmp_path):
    url = _notebook_file(notebook_server, "widgets.ipynb")
    reports = _drive(url, WIDGET_STEPS, tmp_path, notebook_server)
    readouts = [r["text"] for r in reports if "read" in r and SLIDER in r["read"]]
    assert readouts == ["3", "7", "2"], reports
    ran = [r["output"] for r in reports if "run" in r]
    assert ran[1] == "(7, 7)", reports
    # tqdm's bar: its description and percentage, the bar (found above), and its counter.
    bar = [r["text"] for r in reports if r.get("read") == TQDM][0]
    assert "steps" in bar and "100%" in bar and "5/5" in bar, bar
