#!/usr/bin/python3
"""Plot with matplotlib in a kennel session and write the figure to a PNG file.

A plain jupyter_client script: kennel needs nothing special from a client. The figure
arrives as an image/png display_data message, base64-encoded, as from any IPython kernel.

    examples/plot_png.py plot.png                        # a new session, ended afterwards
    examples/plot_png.py --connection-file FILE plot.png # an existing session, kept

Without --connection-file the script asks the kennel CLI for a new session (`kennel new`)
and shuts it down at the end. Run kenneld first (`make run`).
"""

import argparse
import base64
import os
import subprocess
import sys

from jupyter_client import BlockingKernelClient

HERE = os.path.dirname(os.path.abspath(__file__))

CODE = """
import matplotlib.pyplot as plt
import numpy as np

x = np.linspace(0, 2 * np.pi, 200)
fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
ax.plot(x, np.sin(x), label="sin")
ax.plot(x, np.cos(x), label="cos")
ax.legend()
ax.set_title("drawn in a kennel session")
"""


def new_session(kennel, state_dir):
    """The connection file of a new session, from `kennel new`."""
    cmd = [kennel] + (["--state-dir", state_dir] if state_dir else []) + ["new"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def plot(kc, timeout):
    """Run CODE; return the PNG bytes of the first figure it displays."""
    images = []

    def on_output(msg):
        if msg["msg_type"] == "stream":
            sys.stderr.write(msg["content"]["text"])
        elif msg["msg_type"] in ("display_data", "execute_result"):
            data = msg["content"]["data"]
            if "image/png" in data:
                images.append(base64.b64decode(data["image/png"]))
        elif msg["msg_type"] == "error":
            sys.stderr.write("\n".join(msg["content"]["traceback"]) + "\n")

    reply = kc.execute_interactive(CODE, output_hook=on_output, timeout=timeout)
    if reply["content"]["status"] != "ok":
        raise SystemExit(f"the cell failed: {reply['content'].get('ename')}")
    if not images:
        raise SystemExit("the cell displayed no PNG")
    return images[0]


def main():
    default_kennel = os.path.join(HERE, "..", "bin", "kennel")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="where to write the PNG")
    parser.add_argument("--connection-file", help="an existing session's connection file")
    parser.add_argument("--kennel", default=default_kennel if os.path.exists(default_kennel)
                        else "kennel", help="the kennel CLI (default: this checkout's bin/kennel)")
    parser.add_argument("--state-dir", help="kenneld's state directory (kennel --state-dir)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to wait for the plot")
    args = parser.parse_args()

    connection_file = args.connection_file or new_session(args.kennel, args.state_dir)
    kc = BlockingKernelClient(connection_file=connection_file)
    kc.load_connection_file()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=args.timeout)
        png = plot(kc, args.timeout)
        if not args.connection_file:
            kc.shutdown()  # the session was ours: end it (kenneld removes its directory)
    finally:
        kc.stop_channels()
    with open(args.out, "wb") as f:
        f.write(png)
    print(f"wrote {args.out} ({len(png)} bytes)")


if __name__ == "__main__":
    main()
