"""Golden wire vectors for kennel's C codec, made by Debian's real jupyter_client.

Writes to stdout the JSON committed as protocol/vectors/wire.json: Jupyter 5.3
messages as a ROUTER socket receives them (routing identities, "<IDS|MSG>",
HMAC-SHA256 signature, header, parent_header, metadata, content, buffers), each
with the verdict the C codec must reach. wire.json is committed data; the C build
never runs this script. Regenerate, after changing it, with:

    /usr/bin/python3 protocol/vectors/gen_vectors.py > protocol/vectors/wire.json

The ok messages are built and signed by jupyter_client's Session.send; the error
vectors are ok messages with frames altered (and re-signed with Session.sign when
the vector is about the frame's contents, not the signature). Every vector is fed
back through jupyter_client's own receive path as a check (see C_STRICTER).
"""
import base64
import hashlib
import json
import sys
from datetime import datetime, timezone

from jupyter_client.session import DELIM, Session, msg_header

KEY = "b6f2a8c4-3d1e-4f7a-9c2b-5e8d0a1f6b37"
SESSION_ID = "4e1c9a7f-2b3d-4c5e-8f60-718293a4b5c6"
USERNAME = "kennel-test"
DATE = datetime(2024, 5, 17, 9, 30, 15, 123456, tzinfo=timezone.utc)
ID_ZMQ = b"\x00\x80\x00\x41\xa7"  # identity libzmq makes up for a peer that set none
ID_PROXY = b"\x00\x80\x00\x00\x2a"

# Error vectors jupyter_client itself accepts, where the C codec is deliberately stricter:
# it wants every JSON frame to be valid UTF-8 holding an object, and msg_id/msg_type to be
# a non-empty string / a string.
C_STRICTER = {"content_json_array", "parent_json_string", "metadata_json_null",
              "content_invalid_utf8", "header_msg_type_not_string", "header_msg_id_empty"}


class Capture:
    """Stands in for the zmq socket: Session.send hands it the frames it would send."""

    def send_multipart(self, frames, copy=True):
        self.frames = [bytes(f) for f in frames]


def session(key=KEY):
    return Session(key=key.encode(), signature_scheme="hmac-sha256",
                   session=SESSION_ID, username=USERNAME)


def header(msg_type, n, **extra):
    """A header as Session.msg_header makes it, with a fixed msg_id and date."""
    h = msg_header(f"{SESSION_ID}_4242_{n}", msg_type, USERNAME, SESSION_ID)
    h["date"] = DATE
    h.update(extra)
    return h


def send(msg_type, n, content=None, ident=(ID_ZMQ,), key=KEY, extra=None, **kw):
    """The frames jupyter_client puts on the wire, identities first."""
    out = Capture()
    session(key).send(out, msg_type, content, ident=list(ident),
                      header=header(msg_type, n, **(extra or {})), **kw)
    return out.frames


def receive(frames, key):
    """jupyter_client's verdict on frames: (verdict, message or None, identities)."""
    s = session(key)
    try:
        idents, rest = s.feed_identities(frames)
    except ValueError:
        return "no_delimiter", None, []
    try:
        return "ok", s.deserialize(rest), idents
    except IndexError:
        return "too_few_frames", None, idents
    except TypeError as e:
        assert str(e).startswith("malformed message"), e
        return "too_few_frames", None, idents
    except json.JSONDecodeError:
        return "bad_json", None, idents
    except KeyError:
        return "bad_header", None, idents
    except ValueError as e:
        assert "Signature" in str(e) or "Unsigned" in str(e), e
        return "bad_signature", None, idents


def vector(name, frames, expect="ok", key=KEY):
    verdict, msg, idents = receive(frames, key)
    assert verdict == ("ok" if name in C_STRICTER else expect), (name, verdict)
    v = {"name": name, "key": key,
         "frames_b64": [base64.b64encode(f).decode() for f in frames], "expect": expect}
    if expect == "ok":
        v.update(msg_type=msg["header"]["msg_type"], msg_id=msg["header"]["msg_id"],
                 n_identities=len(idents), n_buffers=len(msg["buffers"]),
                 content_sha256=hashlib.sha256(frames[len(idents) + 5]).hexdigest())
    return v


def resign(frames):
    """frames with the signature recomputed over the (up to four) frames after it."""
    d = frames.index(DELIM) + 1
    return frames[:d] + [session().sign(frames[d + 1:d + 5])] + frames[d + 1:]


def altered(frames, i, new, sign=False):
    """frames with frame i (counted from the signature) replaced, optionally re-signed."""
    d = frames.index(DELIM) + 1
    assert new != frames[d + i]
    out = frames[:d + i] + [new] + frames[d + i + 1:]
    return resign(out) if sign else out


SIG, HEADER, PARENT, METADATA, CONTENT = range(5)
EXECUTE = {"code": "π = 3.14 # ✓", "silent": False, "store_history": True,
           "user_expressions": {}, "allow_stdin": True, "stop_on_error": True}
PARENT_HEADER = header("execute_request", 1)
NOTEBOOK_META = {"deletedCells": [], "recordTiming": False,
                 "cellId": "0f9e8d7c-6b5a-4938-a2b1-c0d9e8f7a6b5"}


def ok_vectors():
    comm = {"comm_id": "8c1d2e3f-4a5b-4c6d-9e7f-8091a2b3c4d5",
            "data": {"method": "update", "state": {"value": None, "mask": None},
                     "buffer_paths": [["value"], ["mask"]]}}
    big = "".join(f"print({i:05d})  # é\n" for i in range(5000))  # ~100 kB of code
    return [
        vector("kernel_info_request", send("kernel_info_request", 0)),
        vector("execute_request_unicode", send("execute_request", 1, EXECUTE)),
        vector("execute_request_two_identities",
               send("execute_request", 2, EXECUTE, ident=(ID_PROXY, ID_ZMQ))),
        vector("comm_msg_two_buffers",
               send("comm_msg", 3, comm, buffers=[bytes(range(256)), b"\x00" * 10])),
        vector("empty_key_unsigned", send("kernel_info_request", 4, key=""), key=""),
        vector("header_extra_fields",
               send("kernel_info_request", 5,
                    extra={"subshell_id": None, "x_kennel_trace": ["a", 1, {"b": True}]})),
        vector("parent_and_metadata",
               send("execute_request", 6, EXECUTE, parent=PARENT_HEADER,
                    metadata=NOTEBOOK_META)),
        vector("large_content", send("execute_request", 7, dict(EXECUTE, code=big))),
    ]


def error_vectors():
    base = send("execute_request", 10, EXECUTE, parent=PARENT_HEADER, metadata=NOTEBOOK_META)
    d = base.index(DELIM)
    sig, hdr, parent, meta, content = base[d + 1:d + 6]
    good = json.loads(hdr)

    def edited_header(*drop, **changes):
        h = {k: v for k, v in good.items() if k not in drop}
        h.update(changes)
        return altered(base, HEADER, session().pack(h), sign=True)

    def resigned(i, new):
        return altered(base, i, new, sign=True)

    return [
        vector("no_delimiter", base[:d] + base[d + 1:], "no_delimiter"),
        vector("delimiter_lowercase", base[:d] + [b"<ids|msg>"] + base[d + 1:],
               "no_delimiter"),
        vector("four_frames_after_delimiter", resign(base[:-1]), "too_few_frames"),
        vector("delimiter_only", base[:d + 1], "too_few_frames"),
        vector("wrong_key", send("execute_request", 10, EXECUTE, key="not-the-key",
                                 parent=PARENT_HEADER, metadata=NOTEBOOK_META),
               "bad_signature"),
        vector("tampered_header", altered(base, HEADER, hdr.replace(b"execute", b"inspect")),
               "bad_signature"),
        vector("tampered_parent", altered(base, PARENT, parent.replace(b"_1", b"_2")),
               "bad_signature"),
        vector("tampered_metadata",
               altered(base, METADATA, meta.replace(b"false", b"true")), "bad_signature"),
        vector("tampered_content", altered(base, CONTENT, content.replace(b"3.14", b"3.15")),
               "bad_signature"),
        vector("signature_truncated", altered(base, SIG, sig[:-1]), "bad_signature"),
        vector("signature_non_hex", altered(base, SIG, sig[:-1] + b"g"), "bad_signature"),
        vector("signature_uppercase", altered(base, SIG, sig.upper()), "bad_signature"),
        vector("signature_empty", altered(base, SIG, b""), "bad_signature"),
        vector("header_not_json", resigned(HEADER, hdr[:-1]), "bad_json"),
        vector("content_json_array", resigned(CONTENT, b'["code", "1+1"]'), "bad_json"),
        vector("parent_json_string", resigned(PARENT, b'"execute_request"'), "bad_json"),
        vector("metadata_json_null", resigned(METADATA, b"null"), "bad_json"),
        vector("content_invalid_utf8", resigned(CONTENT, b'{"code": "\xcf\x80 \xff\xfe"}'),
               "bad_json"),
        vector("header_missing_msg_id", edited_header("msg_id"), "bad_header"),
        vector("header_missing_msg_type", edited_header("msg_type"), "bad_header"),
        vector("header_msg_type_not_string", edited_header(msg_type=42), "bad_header"),
        vector("header_msg_id_empty", edited_header(msg_id=""), "bad_header"),
    ]


def main():
    doc = {"comment": "Jupyter 5.3 wire messages as a ROUTER receives them, frames in base64; "
                      "made by jupyter_client's Session (hmac-sha256) via gen_vectors.py. "
                      "Committed data: regenerate with /usr/bin/python3 "
                      "protocol/vectors/gen_vectors.py > protocol/vectors/wire.json. "
                      "expect is ok or the error the codec must report. jupyter_client "
                      "itself accepts " + ", ".join(sorted(C_STRICTER)) + "; kennel is stricter.",
           "vectors": ok_vectors() + error_vectors()}
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
