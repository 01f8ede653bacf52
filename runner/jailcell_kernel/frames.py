"""The wire encoding, both directions: a 4-byte big-endian length N, then
N bytes of a UTF-8 JSON object whose "t" key names its type."""

import json
import struct

MAX_FRAME = 64 << 20  # refuse larger frames from the host


# ensure_ascii=False keeps non-ASCII output compact; lone surrogates
# (possible in str(exc) or a bundle) cannot be UTF-8, so they become "?".
# allow_nan=False: NaN is not JSON and would make the host reject the frame.
# One encoder for every frame: json.dumps with options builds a new one per
# call, a third of the cost of a small frame (two per cell).
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _encode(obj):
    """One frame, header included. Raises ValueError if obj cannot be sent."""
    data = _ENCODER.encode(obj).encode("utf-8", "replace")
    if len(data) > MAX_FRAME:
        raise ValueError("frame of %d bytes exceeds %d" % (len(data), MAX_FRAME))
    return struct.pack(">I", len(data)) + data


def _recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise EOFError("host closed the connection")
        got += k
    return bytes(buf)


def _encoded_size(obj):
    return len(json.dumps(obj, ensure_ascii=False, allow_nan=False).encode("utf-8", "replace"))
