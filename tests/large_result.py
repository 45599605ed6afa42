"""Cell code for a large result that passes the output cap, for the integration and hostile
suites.

MAKE_LARGE_RESULT makes `frame`: an execute_result of `x` * RESULT_BYTES, framed for the
kernel pipe (protocol/kernel-pipe.md) as the kernel would send it. WRITE_LARGE_RESULT writes
it into the pipe, fd 3, as the kernel's own result (user code can): one result per cell
passes the output cap, so that the client sees how the cell ended. Made once, written by
each cell, it costs the kernel little: the message's cost falls on kenneld.
"""

RESULT_BYTES = 60 << 20

MAKE_LARGE_RESULT = f"""
import json, struct
def _frame(*parts):
    body = struct.pack(">I", len(parts)) + b"".join(struct.pack(">I", len(p)) + p for p in parts)
    return struct.pack(">I", len(body)) + body
frame = _frame(b'{{"op":"iopub","msg_type":"execute_result"}}', b"{{}}",
               json.dumps({{"data": {{"text/plain": "x" * {RESULT_BYTES}}}, "metadata": {{}},
                           "execution_count": 1}}).encode())
"""

WRITE_LARGE_RESULT = """
import os
view = memoryview(frame)
while view:
    view = view[os.write(3, view):]
"""
