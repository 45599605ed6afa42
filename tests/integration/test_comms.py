"""Comms through kenneld, driven by Debian's jupyter_client: comm_open from the client to a
target the kernel registered, comm_msg both ways (with binary buffers), comm_close,
comm_info_request, a comm the kernel opens, an ipywidgets slider set while a cell runs, and a
revived session telling the client that its old comms are closed."""

import time

import pytest

from .itest_helpers import (collect_iopub, finish, run, shell_reply, shell_request,
                            wait_for)

ECHO_TARGET = """
import comm
seen = []
def echo_target(c, open_msg):
    seen.append(('open', open_msg['content']['data']))
    @c.on_msg
    def _(msg):
        seen.append(('msg', msg['content']['data']))
        print('handler saw', msg['content']['data'])
        c.send({'echo': msg['content']['data']},
               buffers=[b'back:' + bytes(b) for b in msg['buffers']])
    @c.on_close
    def _(msg):
        seen.append(('close', msg['content']['data']))
    c.send({'opened': True})
get_ipython().kernel.comm_manager.register_target('echo', echo_target)
"""


def comm_send(kc, msg_type, content, buffers=None):
    """Send a comm message on shell; its msg_id. No reply comes: its iopub ends in idle."""
    msg = kc.session.msg(msg_type, content)
    kc.session.send(kc.shell_channel.socket, msg, buffers=buffers)
    return msg["header"]["msg_id"]


def comm_round(kc, msg_type, content, buffers=None):
    """Send a comm message and return its iopub messages, busy to idle."""
    return collect_iopub(kc, comm_send(kc, msg_type, content, buffers))


def test_comms_both_ways_with_jupyter_client(session):
    assert run(session, ECHO_TARGET).content["status"] == "ok"
    msgs = comm_round(session, "comm_open", {"comm_id": "c1", "target_name": "echo",
                                            "data": {"hi": 1}})
    assert [m["msg_type"] for m in msgs] == ["status", "comm_msg", "status"]
    assert msgs[1]["content"] == {"comm_id": "c1", "data": {"opened": True}}
    assert shell_request(session, "comm_info") == {"status": "ok",
                                                   "comms": {"c1": {"target_name": "echo"}}}
    assert shell_request(session, "comm_info", target_name="x")["comms"] == {}
    # comm_msg with binary buffers; the handler's output and answer are the comm_msg's.
    msgs = comm_round(session, "comm_msg", {"comm_id": "c1", "data": {"x": 5}},
                      buffers=[b"\x00\xff", b"two"])
    by_type = {m["msg_type"]: m for m in msgs}
    assert by_type["stream"]["content"]["text"] == "handler saw {'x': 5}\n"
    echo = by_type["comm_msg"]
    assert echo["content"] == {"comm_id": "c1", "data": {"echo": {"x": 5}}}
    assert [bytes(b) for b in echo["buffers"]] == [b"back:\x00\xff", b"back:two"]
    # A comm the kernel opens, and a message it sends on it, in a cell.
    cell = run(session, "k = comm.create_comm(target_name='plot', data={'w': 1})\n"
                        "k.send({'step': 1}, buffers=[b'raw'])")
    (opened,) = cell.of_type("comm_open")
    assert opened["content"]["target_name"] == "plot" and opened["content"]["data"] == {"w": 1}
    (sent,) = cell.of_type("comm_msg")
    assert [bytes(b) for b in sent["buffers"]] == [b"raw"]
    kid = opened["content"]["comm_id"]
    assert shell_request(session, "comm_info")["comms"] == {
        "c1": {"target_name": "echo"}, kid: {"target_name": "plot"}}
    # comm_close from the client, and from the kernel.
    assert [m["msg_type"] for m in comm_round(session, "comm_close",
                                              {"comm_id": "c1", "data": {"bye": 1}})] == [
        "status", "status"]
    (closed,) = run(session, "k.close()").of_type("comm_close")
    assert closed["content"] == {"comm_id": kid, "data": {}}
    assert shell_request(session, "comm_info")["comms"] == {}
    assert run(session, "seen").result == (
        "[('open', {'hi': 1}), ('msg', {'x': 5}), ('close', {'bye': 1})]")


def test_a_slider_moved_while_a_cell_runs_is_seen_by_the_next_cell(session):
    # A front end sends comm messages whenever the user moves a widget; those that come while
    # a cell runs wait for it, as in ipykernel, and the next cell sees their effect.
    cell = run(session, "import ipywidgets\n"
                        "s = ipywidgets.IntSlider(value=1)\n"
                        "seen = []\n"
                        "s.observe(lambda change: seen.append(change['new']), names='value')\n"
                        "display(s)", timeout=30)
    assert cell.content["status"] == "ok", cell.content
    # ipykernel, which ipywidgets 6 imports, imports psutil, which printed a traceback at
    # import in the sandbox (it has no /proc/stat).
    assert "Traceback" not in cell.stream("stderr"), cell.stream("stderr")
    model_id = cell.of_type("display_data")[0]["content"]["data"][
        "application/vnd.jupyter.widget-view+json"]["model_id"]
    long_cell = session.execute("import time; time.sleep(1); seen[:]")
    moved = comm_send(session, "comm_msg", {"comm_id": model_id, "data": {
        "method": "backbone", "sync_data": {"value": 42}}})
    later = session.execute("(s.value, seen)")
    assert finish(session, long_cell).result == "[]"
    msgs = collect_iopub(session, moved)
    assert [m["msg_type"] for m in msgs] == ["status", "status"]
    assert finish(session, later).result == "(42, [42])"


def test_a_comm_message_holds_the_kernel_until_its_handler_ends(session):
    # A handler runs user code: its busy and idle frame it, and a cell sent after it waits.
    run(session, "import time, comm\n"
                 "def slow(c, msg):\n"
                 "    c.on_msg(lambda m: (time.sleep(0.5), print('handled')))\n"
                 "get_ipython().kernel.comm_manager.register_target('slow', slow)")
    comm_round(session, "comm_open", {"comm_id": "s1", "target_name": "slow", "data": {}})
    start = time.monotonic()
    handled = comm_send(session, "comm_msg", {"comm_id": "s1", "data": {}})
    after = session.execute("'after'")
    msgs = collect_iopub(session, handled)
    assert [m["msg_type"] for m in msgs] == ["status", "stream", "status"]
    cell = finish(session, after)
    assert cell.result == "'after'" and time.monotonic() - start >= 0.5


@pytest.mark.parametrize("kenneld", [["--idle", "1"]], indirect=True)
def test_a_revived_session_closes_its_old_comms(kenneld, connect):
    info = kenneld.create("widgets")
    kc = connect(info["connection_file"])
    assert run(kc, ECHO_TARGET + "\nmine = comm.create_comm(target_name='k')",
               timeout=20).content["status"] == "ok"
    comm_round(kc, "comm_open", {"comm_id": "front", "target_name": "echo", "data": {}})
    kernel_side = shell_request(kc, "comm_info", target_name="k")["comms"]
    assert len(kernel_side) == 1
    assert wait_for(lambda: kenneld.ok("info_request", {"session": "widgets"})["session"]
                    ["state"] == "evicted", timeout=10, what="eviction")
    # The front end still shows the widgets, and moves one: the session revives, and the new
    # kernel, which has none of those comms, says each is closed before it serves the move.
    msgs = comm_round(kc, "comm_msg", {"comm_id": "front", "data": {"x": 1}})
    assert [m["msg_type"] for m in msgs] == ["status", "comm_close", "comm_close", "status"]
    assert sorted(m["content"]["comm_id"] for m in msgs[1:3]) == sorted(
        ["front", *kernel_side])
    assert shell_request(kc, "comm_info")["comms"] == {}
    cell = run(kc, "len(seen)", timeout=20)
    assert cell.result == "1"  # the handler's list survived the eviction, the comms did not
    assert "mine" in cell.stream("stderr")  # named as lost, as any unsaved name
    assert not cell.of_type("comm_close")
