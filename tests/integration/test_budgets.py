"""Budgets, a session's circuit breakers: CPU, wall time, cells and output summed over its
cells. The cell that crosses one runs to its end; the next is refused (BudgetExhausted,
outcome budget) without reaching the kernel; info shows what is left; the spend survives an
eviction and a kenneld restart; other sessions are not touched. Real kenneld, real
jupyter_client."""

import json

import pytest

from .itest_helpers import close_client, run, wait_for

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass"


def _budgets(kenneld, name):
    return kenneld.ok("info_request", {"session": name})["session"]["budgets"]


def _refused(cell, budget):
    """The cell was refused for `budget`: the reply, its outcome and the iopub error."""
    c = cell.content
    assert c["status"] == "error" and c["ename"] == "BudgetExhausted", c
    assert f"{budget} budget is spent" in c["evalue"], c["evalue"]
    md = cell.reply["metadata"]
    assert md["outcome"] == "budget" and md["metrics"]["wall_ms"] == 0, md
    errors = cell.of_type("error")
    assert [e["content"]["ename"] for e in errors] == ["BudgetExhausted"], cell.types
    assert cell.types[0] == "status" and cell.types[-1] == "status", cell.types
    assert "execute_input" not in cell.types  # it never reached the kernel


def test_cells_budget_refuses_the_next_cell_and_info_shows_what_is_left(kenneld, connect):
    kc = connect(kenneld.create("cells2", limits={"budget_cells": 2})["connection_file"])
    other = connect(kenneld.create("unbudgeted")["connection_file"])
    assert run(kc, "x = 41").content["status"] == "ok"
    b = _budgets(kenneld, "cells2")
    assert b["cells"] == {"limit": 2, "spent": 1, "left": 1}, b
    assert b["cpu"]["limit"] == 0 and b["cpu"]["left"] is None  # none set
    assert run(kc, "x + 1").result == "42"
    cell = run(kc, "x")
    _refused(cell, "cells")
    assert "2 of 2 cells" in cell.content["evalue"]
    _refused(run(kc, "x"), "cells")  # and the next, for the same reason
    b = _budgets(kenneld, "cells2")
    assert b["cells"] == {"limit": 2, "spent": 2, "left": 0}, b
    # kennel info shows the same.
    shown = kenneld.cli("info", "cells2")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["budgets"]["cells"]["left"] == 0
    assert json.loads(shown.stdout)["limits"]["budget_cells"] == 2
    # Another session is untouched.
    for i in range(4):
        assert run(other, f"{i} * 2").result == str(i * 2)
    b = _budgets(kenneld, "unbudgeted")
    assert b["cells"]["limit"] == 0 and b["cells"]["spent"] == 4 and b["cells"]["left"] is None


def test_cpu_budget(kenneld, connect):
    kc = connect(kenneld.create("cpu", limits={"budget_cpu": 0.3})["connection_file"])
    assert run(kc, "1").content["status"] == "ok"
    # The crossing cell runs to its end.
    crossing = run(kc, BURN.format(s=0.5), timeout=30)
    assert crossing.content["status"] == "ok" and crossing.reply["metadata"]["outcome"] == "ok"
    b = _budgets(kenneld, "cpu")["cpu"]
    assert b["spent"] >= 0.5 and b["left"] == 0 and b["limit"] == 0.3, b
    cell = run(kc, "1")
    _refused(cell, "cpu")
    assert "of 0.300 seconds of CPU" in cell.content["evalue"]


def test_wall_budget(kenneld, connect):
    kc = connect(kenneld.create("wall", limits={"budget_wall": 0.5})["connection_file"])
    assert run(kc, "import time\ntime.sleep(0.6)", timeout=30).content["status"] == "ok"
    b = _budgets(kenneld, "wall")["wall"]
    assert b["spent"] >= 0.6 and b["left"] == 0, b
    cell = run(kc, "1")
    _refused(cell, "wall")
    assert "of 0.500 seconds of cells' wall time" in cell.content["evalue"]


def test_output_budget(kenneld, connect):
    kc = connect(kenneld.create("out", limits={"budget_output": 1000})["connection_file"])
    assert run(kc, "print('a' * 100)").content["status"] == "ok"
    b = _budgets(kenneld, "out")["output"]
    assert 100 < b["spent"] < 1000 and b["left"] == 1000 - b["spent"], b
    crossing = run(kc, "print('b' * 2000)")
    assert crossing.content["status"] == "ok" and "b" * 2000 in crossing.stream("stdout")
    cell = run(kc, "print('c')")
    _refused(cell, "output")
    assert "of 1000 bytes of output" in cell.content["evalue"]
    assert cell.stream("stdout") == ""


def test_a_budget_outlives_an_eviction(kenneld, connect):
    kc = connect(kenneld.create("evictee", limits={"idle": 1, "budget_cells": 2})
                 ["connection_file"])
    run(kc, "kept = 7")
    wait_for(lambda: kenneld.ok("info_request", {"session": "evictee"})["session"]["state"]
             == "evicted", timeout=15, what="eviction")
    assert _budgets(kenneld, "evictee")["cells"]["spent"] == 1
    assert run(kc, "kept", timeout=30).result == "7"  # revived: the second cell
    wait_for(lambda: kenneld.ok("info_request", {"session": "evictee"})["session"]["state"]
             == "evicted", timeout=15, what="a second eviction")
    _refused(run(kc, "kept", timeout=30), "cells")
    assert _budgets(kenneld, "evictee")["cells"] == {"limit": 2, "spent": 2, "left": 0}


@pytest.mark.own_kenneld
def test_a_budget_outlives_a_kenneld_restart(kenneld, connect):
    info = kenneld.create("durable", limits={"budget_cells": 1, "budget_wall": 3600})
    kc = connect(info["connection_file"])
    run(kc, "import time\ntime.sleep(0.02)\nkept = 1")  # wall time to count in whole ms
    close_client(kc)
    kenneld.stop()
    assert kenneld.proc.returncode == 0
    second = kenneld.successor()
    second.start()
    try:
        b = _budgets(second, "durable")
        assert b["cells"] == {"limit": 1, "spent": 1, "left": 0}, (b, second.log())
        assert b["wall"]["limit"] == 3600 and b["wall"]["spent"] >= 0.02, b
        _refused(run(connect(info["connection_file"]), "kept", timeout=30), "cells")
    finally:
        second.stop()
    assert second.proc.returncode == 0


@pytest.mark.parametrize("kenneld", [["--budget-cells", "1"]], indirect=True)
def test_kenneld_wide_default_and_a_sessions_own(kenneld, connect):
    kc = connect(kenneld.create("defaulted")["connection_file"])
    assert kenneld.ok("info_request", {"session": "defaulted"})["session"]["limits"][
        "budget_cells"] == 1
    run(kc, "1")
    _refused(run(kc, "2"), "cells")
    # A session may ask for none (0) or more, by create_request or kennel new.
    free = connect(kenneld.create("free", limits={"budget_cells": 0})["connection_file"])
    assert [run(free, f"{i}").result for i in range(3)] == ["0", "1", "2"]
    made = kenneld.cli("new", "--name", "cli3", "--budget-cells", "3", "--budget-output", "1M")
    assert made.returncode == 0, made.stderr
    limits = kenneld.ok("info_request", {"session": "cli3"})["session"]["limits"]
    assert limits["budget_cells"] == 3 and limits["budget_output"] == 1 << 20, limits


def test_bad_budgets_are_refused(kenneld):
    for bad in ({"budget_cells": 1.5}, {"budget_cells": -1}, {"budget_wall": "10"},
                {"budget_cpu": 366 * 86400}):
        reply = kenneld.call("create_request", {"name": "bad", "limits": bad})
        assert reply["status"] == "error" and reply["ename"] == "BadRequest", (bad, reply)
