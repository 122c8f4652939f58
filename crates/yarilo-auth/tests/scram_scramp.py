"""SCRAM client from Python's scramp, speaking the auth service protocol.

usage: scram_scramp.py HOST PORT MECH USER PASSWORD
prints OK <user> when the server accepted the proof AND its server
signature verified, FAIL <code> when the server refused.
"""
import base64
import socket
import sys

from scramp import ScramClient

host, port, mech, user, password = sys.argv[1:6]
sock = socket.create_connection((host, int(port)), timeout=30)
f = sock.makefile("rwb")


def send(*fields):
    f.write(("\t".join(fields) + "\n").encode())
    f.flush()


def recv():
    line = f.readline().decode().rstrip("\n")
    if not line:
        raise SystemExit("connection closed")
    return line.split("\t")


send("VERSION", "auth", "1", "0")
assert recv()[:2] == ["VERSION", "auth"]

client = ScramClient([mech], user, password)
first = client.get_client_first()
send("AUTH", "1", mech, "service=imap", "ip=192.0.2.5", "session=py", "secured",
     "resp=" + base64.b64encode(first.encode()).decode())
reply = recv()
if reply[0] == "FAIL":
    print("FAIL", reply[2])
    sys.exit(0)
assert reply[0] == "CONT", reply
client.set_server_first(base64.b64decode(reply[2]).decode())
final = client.get_client_final()
send("CONT", "1", base64.b64encode(final.encode()).decode())
reply = recv()
if reply[0] == "FAIL":
    print("FAIL", reply[2])
    sys.exit(0)
assert reply[0] == "OK", reply
fields = dict(x.split("=", 1) for x in reply[2:] if "=" in x)
# Raises if the server signature is wrong: the server proved it knows the keys.
client.set_server_final(base64.b64decode(fields["resp"]).decode())
assert len(fields["token"]) == 64
print("OK", fields["user"])
