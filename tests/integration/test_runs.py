"""Run records (docs/runtime.md#run-records), through a real kenneld and jupyter_client: one
JSON line per cell in STATE/runs/YYYY-MM-DD.jsonl with the code's sha256 (the code itself,
redacted, only with --record-code), the runtime digest, limits, outcome, metrics, output
bytes, artifacts and error name; `kennel runs` shows them; --runs-keep removes old days and
0 turns them off."""

import hashlib
import json
import os
import time

import pytest

from .itest_helpers import run, wait_for, wait_ready

RECORD_WAIT_S = 10  # records are written on kenneld's worker, just after the reply
FIRST_CELL_S = 40  # a new kenneld's first cell waits for its zygote's imports (busy machine)


def _records(k):
    out = []
    runs = k.state_dir / "runs"
    if not runs.exists():
        return out
    for day in sorted(runs.glob("????-??-??.jsonl")):
        try:
            text = day.read_text()
        except FileNotFoundError:
            continue  # a day kenneld's --runs-keep removed since the listing
        out += [json.loads(line) for line in text.splitlines()]
    return out


def _wait_records(k, n):
    wait_for(lambda: len(_records(k)) >= n, RECORD_WAIT_S, f"{n} run records")
    return _records(k)


def _client(connect, info):
    """A ready client of a new kenneld's session: its first kernel waits for the zygote."""
    kc = connect(info["connection_file"], ready=False)
    wait_ready(kc, timeout=FIRST_CELL_S)
    return kc


def _sha(code):
    return hashlib.sha256(code.encode()).hexdigest()


@pytest.mark.timeout_s(60)
def test_every_cell_has_one_record(start_kenneld, connect):
    k = start_kenneld(args=["--record-code", "--pool", "0"])
    info = k.create("rec")
    kc = _client(connect, info)
    cells = ["x = 6 * 7\nprint(x)",
             "open('out.csv', 'w').write('a,b\\n1,2\\n')",
             "api_key = 'sk-abcdefghijklmnopqrstuvwx'\n1 / 0"]
    for code in cells:
        run(kc, code, timeout=FIRST_CELL_S)
    recs = _wait_records(k, 3)
    assert len(recs) == 3, recs
    first, second, third = recs
    for i, (rec, code) in enumerate(zip(recs, cells)):
        assert rec["session"] == info["id"] and rec["name"] == "rec"
        assert rec["cell"] == i + 1
        assert rec["code_sha256"] == _sha(code)
        assert rec["runtime_digest"].startswith("sha256:")
        assert rec["limits"]["memory"] > 0 and "timeout" in rec["limits"]
        assert rec["metrics"]["wall_ms"] >= 0 and rec["metrics"]["cpu_ms"] >= 0
        assert rec["time"].endswith("Z")
    assert first["outcome"] == "ok" and first["error"] is None
    assert first["output_bytes"] > len("42\n")
    assert first["code"] == cells[0]
    assert second["artifacts"] == [{"name": "out.csv", "size": 8}]
    assert third["outcome"] == "error" and third["error"] == "ZeroDivisionError"
    # The secret is not on the disk, though the hash is of the code as it ran.
    assert third["code"] == "api_key = '[REDACTED]'\n1 / 0"
    assert "sk-abcdefghijklmnopqrstuvwx" not in (k.state_dir / "runs").joinpath(
        time.strftime("%Y-%m-%d.jsonl", time.gmtime())).read_text()
    # kennel runs: the same records, the newest last; N and --since bound them.
    out = k.cli("runs", "--json")
    assert out.returncode == 0, out.stderr
    assert [json.loads(line) for line in out.stdout.splitlines()] == recs
    out = k.cli("runs", "2", "--json")
    assert [json.loads(line)["cell"] for line in out.stdout.splitlines()] == [2, 3]
    assert k.cli("runs", "--since", "2099-01-01", "--json").stdout == ""
    assert len(k.cli("runs", "--since", "1h", "--json").stdout.splitlines()) == 3
    table = k.cli("runs").stdout.splitlines()
    assert len(table) == 4 and "ZeroDivisionError" in table[3] and "rec" in table[3]
    bad = k.cli("runs", "--since", "yesterday")
    assert bad.returncode == 2


@pytest.mark.timeout_s(60)
def test_a_cell_the_kernel_died_in_and_a_large_cell(start_kenneld, connect):
    k = start_kenneld(args=["--pool", "0"])
    kc = _client(connect, k.create("crash"))
    big = "x = '" + "a" * (100 << 10) + "'\nlen(x)"  # content past 64 KiB: parsed shallowly
    run(kc, big, timeout=FIRST_CELL_S)
    run(kc, "import os; os._exit(3)")
    recs = _wait_records(k, 2)
    assert recs[0]["code_sha256"] == _sha(big)
    assert "code" not in recs[0]  # no --record-code
    assert recs[1]["outcome"] == "crashed" and recs[1]["error"] == "KernelDied"
    assert recs[1]["code_sha256"] == _sha("import os; os._exit(3)")
    assert recs[1]["cell"] == 2


@pytest.mark.timeout_s(100)
def test_runs_keep_removes_old_days_and_0_means_none(start_kenneld, connect):
    k = start_kenneld(args=["--runs-keep", "2", "--pool", "0"])
    runs = k.state_dir / "runs"
    old = runs / "2001-01-01.jsonl"
    old.write_text('{"time": "2001-01-01T00:00:00.000Z"}\n')
    yesterday = runs / time.strftime("%Y-%m-%d.jsonl", time.gmtime(time.time() - 86400))
    yesterday.write_text("")
    kc = _client(connect, k.create("keep"))
    run(kc, "1 + 1", timeout=FIRST_CELL_S)
    _wait_records(k, 1)
    wait_for(lambda: not old.exists(), RECORD_WAIT_S, "the old day removed")
    assert yesterday.exists()  # within 2 days
    off = start_kenneld(args=["--runs-keep", "0", "--pool", "0"])
    kc = _client(connect, off.create("off"))
    run(kc, "1 + 1", timeout=FIRST_CELL_S)
    time.sleep(0.5)
    assert not (off.state_dir / "runs").exists()
    assert off.cli("runs").stdout == ""
