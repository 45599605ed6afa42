"""Comms in the real kernel, over its pipe (protocol/kernel-pipe.md): comm_open, comm_msg and
comm_close from the front end, each ended by the kernel's `done`; comms the kernel opens,
with python3-comm's API and with ipykernel's Comm (what ipywidgets 6 uses); binary buffers
both ways; comm_info_request; an ipywidgets slider's value set from the front end; and the
comms a revived kernel's predecessor had open, closed at its first request."""

import json
import signal
import time

from kernel_pipe_client import KernelProcess, jdump, streams


def only(iopub, msg_type):
    found = [c for t, c in iopub if t == msg_type]
    assert len(found) == 1, (msg_type, iopub)
    return found[0]


def result(kernel, code):
    reply, iopub = kernel.execute(code)
    assert reply["status"] == "ok", reply
    return only(iopub, "execute_result")["data"]["text/plain"]


ECHO_TARGET = """
seen = []
def echo_target(comm, open_msg):
    seen.append(('open', open_msg['content']['data']))
    @comm.on_msg
    def _(msg):
        seen.append(('msg', msg['content']['data'], [bytes(b) for b in msg['buffers']]))
        print('handler saw', msg['content']['data'])
        comm.send({'echo': msg['content']['data']}, buffers=[b'back:' + bytes(b) for b in msg['buffers']])
    @comm.on_close
    def _(msg):
        seen.append(('close', msg['content']['data']))
    comm.send({'opened': True})
get_ipython().kernel.comm_manager.register_target('echo', echo_target)
"""


def test_the_kernel_object_is_there_and_cheap(kernel):
    # Libraries look for get_ipython().kernel; making it imports neither ipykernel (zmq,
    # tornado, jupyter_client) nor ipywidgets.
    assert result(kernel, "k = get_ipython().kernel\n"
                          "(type(k).__name__, hasattr(k, 'comm_manager'), k.shell is get_ipython())"
                  ) == "('KernelShim', True, True)"
    assert result(kernel, "import sys\nsorted({m.split('.')[0] for m in sys.modules} & "
                          "{'ipykernel', 'ipywidgets', 'zmq', 'tornado', 'jupyter_client'})"
                  ) == "[]"


def test_comm_open_msg_close_from_the_front_end_with_buffers(kernel):
    assert kernel.request("comm_info_request", {}) == {"status": "ok", "comms": {}}
    assert kernel.execute(ECHO_TARGET)[0]["status"] == "ok"
    iopub = kernel.comm("comm_open", {"comm_id": "c1", "target_name": "echo",
                                      "data": {"hello": 1}})
    assert iopub == [("comm_msg", {"data": {"opened": True}, "comm_id": "c1"})]
    assert kernel.request("comm_info_request", {}) == {
        "status": "ok", "comms": {"c1": {"target_name": "echo"}}}
    assert kernel.request("comm_info_request", {"target_name": "other"})["comms"] == {}
    assert kernel.request("comm_info_request", {"target_name": "echo"})["comms"] == {
        "c1": {"target_name": "echo"}}
    # A comm_msg with two binary buffers; the handler prints and answers with buffers.
    iopub = kernel.comm("comm_msg", {"comm_id": "c1", "data": {"x": 5}},
                        buffers=[b"\x00\x01", b"two"])
    assert streams(iopub, "stdout") == "handler saw {'x': 5}\n"
    assert only(iopub, "comm_msg") == {"data": {"echo": {"x": 5}}, "comm_id": "c1"}
    assert kernel.buffers == [("comm_msg", [b"back:\x00\x01", b"back:two"])]
    kernel.comm("comm_close", {"comm_id": "c1", "data": {"bye": True}})
    assert kernel.request("comm_info_request", {})["comms"] == {}
    assert result(kernel, "seen") == (
        "[('open', {'hello': 1}),\n ('msg', {'x': 5}, [b'\\x00\\x01', b'two']),\n"
        " ('close', {'bye': True})]")


def test_a_comm_open_for_no_target_is_closed_again(kernel):
    # As ipykernel: comm_close on iopub, and the kernel's log says why.
    iopub = kernel.comm("comm_open", {"comm_id": "c2", "target_name": "nobody", "data": {}})
    assert iopub == [("comm_close", {"data": {}, "comm_id": "c2"})]
    assert any("No such comm target registered: nobody" in line for line in kernel.logs)
    assert kernel.request("comm_info_request", {})["comms"] == {}
    # A message for a comm nobody has: logged, and the kernel is done with it all the same.
    assert kernel.comm("comm_msg", {"comm_id": "gone", "data": {}}) == []
    assert any("No such comm: gone" in line for line in kernel.logs)
    assert result(kernel, "'alive'") == "'alive'"


def test_comms_the_kernel_opens_with_the_comm_package(kernel):
    reply, iopub = kernel.execute(
        "import comm\n"
        "c = comm.create_comm(target_name='plot', data={'w': 1}, metadata={'m': 2},\n"
        "                     buffers=[memoryview(b'raw')])\n"
        "c.send({'step': 1})\n"
        "got = []\n"
        "c.on_msg(lambda msg: got.append(msg['content']['data']))")
    assert reply["status"] == "ok"
    opened = only(iopub, "comm_open")
    comm_id = opened["comm_id"]
    assert opened == {"data": {"w": 1}, "comm_id": comm_id, "target_name": "plot",
                      "target_module": None}
    assert only(iopub, "comm_msg") == {"data": {"step": 1}, "comm_id": comm_id}
    assert kernel.buffers == [("comm_open", [b"raw"])]
    assert kernel.iopub_metadata == [("comm_open", {"m": 2})]
    kernel.comm("comm_msg", {"comm_id": comm_id, "data": {"clicked": True}})
    assert result(kernel, "got") == "[{'clicked': True}]"
    assert kernel.request("comm_info_request", {})["comms"] == {comm_id: {"target_name": "plot"}}
    reply, iopub = kernel.execute("c.close()")
    assert only(iopub, "comm_close") == {"data": {}, "comm_id": comm_id}
    assert kernel.request("comm_info_request", {})["comms"] == {}


def test_ipykernels_comm_and_kernel_instance_are_the_kernels(kernel):
    # ipywidgets 6 and matplotlib's nbagg build on ipykernel.comm.Comm, whose kernel is
    # ipykernel's Kernel.instance(): made when ipykernel is imported, even by Comm() alone.
    reply, iopub = kernel.execute(
        "from ipykernel.comm import Comm\n"
        "from ipykernel.kernelbase import Kernel\n"
        "c = Comm(target_name='ipk', data={'a': 1})\n"
        "c.send({'b': 2}, buffers=[b'xy'])\n"
        "(Kernel.initialized(), Kernel.instance().comm_manager is get_ipython().kernel.comm_manager)")
    assert reply["status"] == "ok", reply
    assert only(iopub, "execute_result")["data"]["text/plain"] == "(True, True)"
    opened = only(iopub, "comm_open")
    assert opened["target_name"] == "ipk" and opened["data"] == {"a": 1}
    assert only(iopub, "comm_msg") == {"data": {"b": 2}, "comm_id": opened["comm_id"]}
    assert kernel.buffers == [("comm_msg", [b"xy"])]
    # A comm the front end opens is one of ipykernel's now (ipywidgets 6 takes no other).
    kernel.execute("kinds = []\n"
                   "get_ipython().kernel.comm_manager.register_target(\n"
                   "    't', lambda comm, msg: kinds.append(type(comm).__module__))")
    kernel.comm("comm_open", {"comm_id": "c3", "target_name": "t", "data": {}})
    assert result(kernel, "kinds") == "['ipykernel.comm.comm']"


def test_an_ipywidgets_slider_set_from_the_front_end(kernel):
    reply, iopub = kernel.execute(
        "import ipywidgets\n"
        "s = ipywidgets.IntSlider(value=3, min=0, max=10)\n"
        "values = []\n"
        "s.observe(lambda change: (values.append(change['new']), print('now', change['new'])),\n"
        "          names='value')\n"
        "display(s)")
    assert reply["status"] == "ok", reply
    opened = [c for t, c in iopub if t == "comm_open"]
    slider = [c for c in opened if c["data"]["_model_name"] == "IntSliderModel"]
    assert len(slider) == 1 and all(c["target_name"] == "jupyter.widget" for c in opened)
    model_id = slider[0]["comm_id"]
    view = only(iopub, "display_data")["data"]["application/vnd.jupyter.widget-view+json"]
    assert view == {"model_id": model_id}
    # The front end moves the slider: a backbone sync, the observer prints (its output is
    # the comm message's), and a later cell sees the value.
    iopub = kernel.comm("comm_msg", {"comm_id": model_id, "data": {
        "method": "backbone", "sync_data": {"value": 7}}})
    assert streams(iopub, "stdout") == "now 7\n"
    assert result(kernel, "(s.value, values)") == "(7, [7])"
    # A value the kernel sets is sent to the front end as comm_msg updates.
    reply, iopub = kernel.execute("s.value = 9")
    assert only(iopub, "comm_msg") == {"comm_id": model_id, "data": {
        "method": "update", "state": {"value": 9}, "buffers": []}}
    assert model_id in kernel.request("comm_info_request",
                                      {"target_name": "jupyter.widget"})["comms"]


def test_the_output_widget_finds_the_cells_msg_id(kernel):
    msg_id = kernel.send_request("execute_request", {
        "code": "get_ipython().kernel._parent_header['header']['msg_id']", "silent": False,
        "store_history": True, "user_expressions": {}, "allow_stdin": False})
    _, reply, iopub = kernel.collect(msg_id)
    assert only(iopub, "execute_result")["data"]["text/plain"] == repr(msg_id)


def test_a_comm_handler_that_raises_or_is_interrupted(kernel):
    kernel.execute(
        "import time\n"
        "def target(comm, msg):\n"
        "    @comm.on_msg\n"
        "    def _(msg):\n"
        "        if msg['content']['data'].get('loop'):\n"
        "            print('looping', flush=True)\n"
        "            while True: time.sleep(0.01)\n"
        "        raise ValueError('bad handler')\n"
        "get_ipython().kernel.comm_manager.register_target('t', target)")
    kernel.comm("comm_open", {"comm_id": "c4", "target_name": "t", "data": {}})
    # An exception in a handler is logged as ipykernel logs it; the kernel goes on.
    assert kernel.comm("comm_msg", {"comm_id": "c4", "data": {}}) == []
    assert any("Exception in comm_msg for c4" in line for line in kernel.logs), kernel.logs
    # A handler that never returns is stopped by an interrupt, as a cell is.
    msg_id = kernel.send_request("comm_msg", {"comm_id": "c4", "data": {"loop": True}})
    op, parts = kernel.recv_frame()
    assert op == {"op": "iopub", "msg_type": "stream"} and b"looping" in parts[1], (op, parts)
    kernel.proc.send_signal(signal.SIGINT)
    op, _, iopub = kernel.collect(msg_id)
    assert op["op"] == "done"
    assert only(iopub, "error")["ename"] == "KeyboardInterrupt"
    assert result(kernel, "'alive'") == "'alive'"


def test_a_revived_kernel_closes_its_predecessors_comms(kernel, tmp_path):
    kernel.execute(ECHO_TARGET)
    kernel.comm("comm_open", {"comm_id": "front", "target_name": "echo", "data": {}})
    reply, iopub = kernel.execute("import comm\nmine = comm.create_comm(target_name='k')")
    mine = only(iopub, "comm_open")["comm_id"]
    kernel.send_frame([jdump({"op": "save"})])
    op, parts = kernel.recv_frame()
    assert op["op"] == "saved", op
    assert "mine" in op["unsaved"]  # a comm is not kept across an eviction
    fresh = KernelProcess(tmp_path)
    try:
        fresh.send_frame([jdump({"op": "restore"}), parts[0]])
        op, _ = fresh.recv_frame()
        assert op["op"] == "restored", op
        # At its first request, whatever it is, the new kernel tells the front end that the
        # comms it knows nothing of are closed; then serves the request.
        iopub = fresh.comm("comm_msg", {"comm_id": "front", "data": {"x": 1}})
        assert sorted(c["comm_id"] for t, c in iopub if t == "comm_close") == sorted(
            ["front", mine])
        assert [t for t, _ in iopub] == ["comm_close", "comm_close"]
        assert fresh.request("comm_info_request", {})["comms"] == {}
        reply, iopub = fresh.execute("1")
        assert [t for t, _ in iopub if t == "comm_close"] == []  # told once
    finally:
        fresh.kill()


def test_tqdm_notebook_draws_its_bar(kernel):
    # Debian's tqdm 4.64 sets the bar's colour through ipywidgets 7's `style`, which
    # ipywidgets 6 lacks: it failed with AttributeError, under ipykernel too.
    reply, iopub = kernel.execute("from tqdm.notebook import tqdm\n"
                                  "for i in tqdm(range(3), desc='steps', colour='red'):\n"
                                  "    pass")
    assert reply["status"] == "ok", reply
    models = {c["comm_id"]: c["data"]["_model_name"] for t, c in iopub if t == "comm_open"}
    (bar,) = [i for i, name in models.items() if name == "ProgressModel"]
    (box,) = [i for i, name in models.items() if name == "HBoxModel"]
    view = only(iopub, "display_data")["data"]["application/vnd.jupyter.widget-view+json"]
    assert view == {"model_id": box}
    values = [c["data"]["state"]["value"] for t, c in iopub
              if t == "comm_msg" and c["comm_id"] == bar and "value" in c["data"].get("state", {})]
    assert values[-1] == 3
