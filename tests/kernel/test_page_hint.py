"""The zygote's page hint, its Python half (kernels/python/kennel_zygote.py): how learners'
reports are checked, intersected, clipped to the zygote's mappings and turned into runs.
The learners here are this process writing reports on the pipes _PageHint hands out (a
kernel writes them with _kennel_zygote.report_pages: see tests/integration/test_zygote.py)."""

import array
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels" / "python"))
import kennel_zygote as kz  # noqa: E402

P = kz._PAGE
BASE = 1 << 40  # spans of our own making: no real mapping is consulted below


def report(*runs):
    return array.array("Q", [w for run in runs for w in run]).tobytes()


def runs_of(data):
    words = array.array("Q", data)
    return list(zip(words[0::2], words[1::2]))


def test_runs_split_at_each_mapping_and_stop_at_the_limits():
    spans = [(BASE, BASE + 4 * P), (BASE + 4 * P, BASE + 8 * P)]  # adjacent mappings
    pages = {BASE + i * P for i in (0, 1, 2, 3, 4, 5, 7)}
    assert runs_of(kz._runs(pages, spans)) == [(BASE, 4 * P), (BASE + 4 * P, 2 * P),
                                               (BASE + 7 * P, P)]
    many = {BASE + 2 * i * P for i in range(kz._HINT_MAX_RUNS + 10)}  # each its own run
    got = runs_of(kz._runs(many, [(BASE, BASE + 10 ** 6 * P)]))
    assert len(got) == kz._HINT_MAX_RUNS and all(n == P for _, n in got)
    dense = {BASE + i * P for i in range(kz._HINT_MAX_PAGES + 100)}
    got = runs_of(kz._runs(dense, [(BASE, BASE + 10 ** 6 * P)]))
    assert got == [(BASE, kz._HINT_MAX_PAGES * P)]


def test_a_report_is_clipped_to_the_mappings_and_checked():
    spans = [(BASE, BASE + 2 * P), (BASE + 10 * P, BASE + 12 * P)]
    pages = kz._pages_in_maps(report((BASE + P, 3 * P), (BASE + 9 * P, 2 * P)), spans)
    assert pages == {BASE + P, BASE + 10 * P}
    assert kz._pages_in_maps(report((BASE + 1, P)), spans) is None  # not page-aligned
    assert kz._pages_in_maps(report((BASE, P + 8)), spans) is None
    too_big = report((BASE, (kz._HINT_MAX_PAGES + 1) * P))  # would be ~forever to expand
    assert kz._pages_in_maps(too_big, spans) is None


@pytest.fixture
def hint(monkeypatch):
    """A _PageHint of a zygote whose one writable mapping is 64 pages at BASE; the read ends
    of learners still open are closed after the test."""
    monkeypatch.setattr(kz, "_writable_spans", lambda: [(BASE, BASE + 64 * P)])
    h = kz._PageHint()
    yield h
    for r in list(h._learners):
        os.close(r)


def finish(hint, fd, data):
    """A learner writes data on fd and ends; the zygote polls."""
    os.write(fd, data)
    os.close(fd)
    hint.poll()


def test_two_learners_at_once_and_the_hint_is_what_both_wrote(hint):
    a, b = hint.learn_fd(), hint.learn_fd()
    assert a > 4 and b > 4  # a session's init puts its own fds on 3 and 4
    assert hint.learn_fd() == -1  # two learners at most, at once
    assert not hint.settled()
    finish(hint, a, report((BASE, 4 * P), (BASE + 10 * P, P)))
    assert hint.pages == 5 and not hint.settled()  # b still learning
    os.write(b, report((BASE + 2 * P, 4 * P), (BASE + 10 * P, P)))
    hint.poll()
    assert hint.pages == 5  # b has not closed its end: not done
    os.close(b)
    hint.poll()
    assert hint.settled() and hint.learn_fd() == -1
    assert runs_of(hint.runs) == [(BASE + 2 * P, 2 * P), (BASE + 10 * P, P)]
    assert hint.pages == 3


def test_learners_that_die_or_lie_are_replaced_then_given_up(hint):
    for bad in (b"", b"x" * 15, report((BASE + 3, P))):  # died; not runs; unaligned
        fd = hint.learn_fd()
        assert fd > 4
        finish(hint, fd, bad)
        assert hint.pages == 0
    finish(hint, hint.learn_fd(), report((BASE, 2 * P)))  # the fourth and last
    assert hint.settled() and hint.learn_fd() == -1
    assert hint.pages == 2  # one report is the hint when no second comes


def test_a_report_longer_than_a_hint_is_refused(hint):
    fd = hint.learn_fd()
    data = report(*[(BASE, P)] * (kz._HINT_MAX_BYTES // 16 + 1))
    assert len(data) < 65536  # fits the pipe: one write
    assert os.write(fd, data) == len(data)
    hint.poll()  # refused once it is longer than a hint, before the learner is done
    os.close(fd)
    assert hint.pages == 0 and not hint._learners and not hint.settled()
