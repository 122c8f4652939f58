"""COMPRESS=DEFLATE with Python's zlib (raw deflate, sync flush): fetch a
large mailbox over a compressed session and report the byte savings.

Usage: compress.py PORT USER PASSWORD MESSAGES
"""
import socket
import sys
import zlib

port, user, password, count = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
assert f.readline().startswith(b"* OK")


def plain(cmd):
    tag = cmd.split(b" ", 1)[0]
    s.sendall(cmd + b"\r\n")
    lines = []
    while True:
        line = f.readline()
        lines.append(line)
        if line.startswith(tag + b" "):
            return lines


assert plain(f"a LOGIN {user} {password}".encode())[-1].startswith(b"a OK")
body = b"".join(b"Line %d of a long and repetitive message body.\r\n" % i for i in range(200))
for i in range(count):
    msg = b"Subject: m%d\r\n\r\n" % i + body
    s.sendall(b"p%d APPEND INBOX {%d+}\r\n" % (i, len(msg)) + msg + b"\r\n")
    while not f.readline().startswith(b"p%d " % i):
        pass
assert plain(b"c COMPRESS DEFLATE")[-1] == b"c OK Begin compression.\r\n"

comp = zlib.compressobj(6, zlib.DEFLATED, -15)
decomp = zlib.decompressobj(-15)
wire_in = 0
buf = b""


def send(cmd):
    s.sendall(comp.compress(cmd + b"\r\n") + comp.flush(zlib.Z_SYNC_FLUSH))


def until(tag):
    global buf, wire_in
    while True:
        i = buf.find(b"\r\n" + tag + b" ")
        if i >= 0:
            j = buf.find(b"\r\n", i + 2)
            if j >= 0:
                out, buf = buf[: j + 2], buf[j + 2 :]
                return out
        data = s.recv(65536)
        if not data:
            raise SystemExit("connection closed")
        wire_in += len(data)
        buf += decomp.decompress(data)


send(b"s SELECT INBOX")
out = until(b"s")
assert b"* %d EXISTS" % count in out, out[:200]
send(b"f FETCH 1:* (BODY.PEEK[])")
out = until(b"f")
assert out.count(b"FETCH (BODY[]") == count, out[:200]
assert out.count(body) == count
plain_bytes = len(out)
send(b"z LOGOUT")
until(b"z")
print(f"compress: {plain_bytes} bytes of responses in {wire_in} bytes on the wire ({100 - 100 * wire_in // max(plain_bytes, 1)}% saved)")
