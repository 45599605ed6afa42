"""kennel_curve: reach a kennel session whose sockets are CURVE servers (`kenneld --curve`,
`kennel new --curve`) from Debian's pyzmq and jupyter_client 7.4, which knows nothing of
CURVE. Upstream jupyter_client 8.9 (JEP 145) does this by itself.

The connection file's `curve_publickey` and `curve_secretkey` are the session's key pair. A
client uses the public key as the server's key and the pair as its own: kenneld admits only
clients that hold the pair (the heartbeat takes any key pair, as upstream's heartbeat makes
a fresh one). The connection file is the credential, as its HMAC key already is: keep it
0600.

    from kennel_curve import client
    kc = client("/path/to/connection.json")   # a started BlockingKernelClient
    kc.execute_interactive("print(1 + 1)")
    kc.stop_channels()

    sock = curve_socket(zmq.Context.instance(), zmq.DEALER, conn, "shell")  # raw pyzmq
"""
import json

import zmq
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.channels import HBChannel


def load(connection_file):
    """The connection file as a dict; ValueError when it holds no CURVE key pair."""
    with open(connection_file) as f:
        conn = json.load(f)
    if not conn.get("curve_publickey") or not conn.get("curve_secretkey"):
        raise ValueError(f"{connection_file} has no curve_publickey and curve_secretkey")
    return conn


def apply_keys(sock, conn):
    """Make sock (not yet connected) a CURVE client of the session conn describes."""
    pub = conn["curve_publickey"].encode()
    sock.curve_serverkey = pub
    sock.curve_publickey = pub
    sock.curve_secretkey = conn["curve_secretkey"].encode()


def endpoint(conn, channel):
    port = conn[f"{channel}_port"]
    if conn.get("transport", "tcp") == "ipc":
        return f"ipc://{conn['ip']}-{port}"
    return f"tcp://{conn['ip']}:{port}"


def curve_socket(ctx, kind, conn, channel):
    """A socket of kind connected with the session's keys to channel ("shell", "iopub", …)."""
    sock = ctx.socket(kind)
    sock.linger = 0
    apply_keys(sock, conn)
    if kind == zmq.SUB:
        sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(endpoint(conn, channel))
    return sock


class CurveKernelClient(BlockingKernelClient):
    """jupyter_client 7.4's blocking client, its sockets CURVE clients with the keys of the
    connection file it loaded."""

    curve = None  # the connection dict, once loaded

    def load_connection_info(self, info):
        super().load_connection_info(info)
        if info.get("curve_publickey") and info.get("curve_secretkey"):
            self.curve = dict(info)
            conn = self.curve

            class _HB(HBChannel):
                def _create_socket(self):
                    if self.socket is not None:
                        self.poller.unregister(self.socket)
                        self.socket.close()
                    self.socket = self.context.socket(zmq.REQ)
                    self.socket.linger = 1000
                    apply_keys(self.socket, conn)
                    self.socket.connect(self.address)
                    self.poller.register(self.socket, zmq.POLLIN)

            self.hb_channel_class = _HB

    def _create_connected_socket(self, channel, identity=None):
        if self.curve is None:
            return super()._create_connected_socket(channel, identity)
        sock = self.context.socket(_TYPES[channel])
        sock.linger = 1000
        if identity:
            sock.identity = identity
        apply_keys(sock, self.curve)
        sock.connect(self._make_url(channel))
        return sock


_TYPES = {"shell": zmq.DEALER, "iopub": zmq.SUB, "stdin": zmq.DEALER, "control": zmq.DEALER,
          "hb": zmq.REQ}


def client(connection_file, start=True):
    """A CurveKernelClient of the session in connection_file, its channels started."""
    kc = CurveKernelClient()
    kc.load_connection_file(connection_file)
    if kc.curve is None:
        raise ValueError(f"{connection_file} has no curve_publickey and curve_secretkey")
    if start:
        kc.start_channels()
    return kc
