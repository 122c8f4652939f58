#!/usr/bin/env bash
# The cost of the login-proxy hop: the same IMAP work through
# `imap-login` → `yarilo imap` (standalone shape) and straight to
# `yarilo single`, in one run, release build. Reports connection setup
# (connect, LOGIN, LOGOUT) and FETCH throughput of a large message, and
# the proxy/direct ratios.
#
#   bench/login/run.sh            # defaults: 300 logins, a 20 MB message x 10
#   CONNS=1000 SIZE_MB=50 bench/login/run.sh
set -euo pipefail
source "$(dirname "$0")/../imap/lib.sh"
CONNS="${CONNS:-300}"
SIZE_MB="${SIZE_MB:-20}"
FETCHES="${FETCHES:-10}"
require_tools python3
build_release
TMP="$(mktemp -d /var/tmp/yarilo-login-bench.XXXXXX)"
trap cleanup EXIT INT TERM

port() { "$BENCH" freeport 1; }
D="$TMP/standalone"; mkdir -p "$D"
echo "alice:{PLAIN}secret::::::" > "$D/users"
common() {
    cat <<YAML
general: { data_dir: $D, hostname: bench.invalid, xclient: { trusted_nets: [127.0.0.1/32] } }
auth: { disable_plaintext_auth: false, auth_failure_delay_seconds: 0 }
imap: { auth_failure_delay_seconds: 0 }
telemetry: { listen: "" }
locks_service: { mode: embedded, socket: $D/locks.sock }
locks_client: { mode: embedded, socket: $D/locks.sock }
YAML
}
start() { # name config-file
    "$YARILO" "$1" --config "$2" > "$2.out" 2> "$2.err" &
    PIDS+=("$!")
}
wait_for() { # file prefix
    for _ in $(seq 200); do
        grep -q "$2" "$1" 2>/dev/null && { grep "$2" "$1" | head -1 | awk '{print $2}'; return; }
        sleep 0.05
    done
    die "no '$2' in $1: $(cat "$1.err" 2>/dev/null | tail -5)"
}
AUTH_PORT=$(port)
{ common; echo "auth_service: { listen: 127.0.0.1:$AUTH_PORT }"; } > "$D/auth.yaml"; start auth "$D/auth.yaml"
{ common; } > "$D/locks.yaml"; start locks "$D/locks.yaml"
sleep 0.5
BACK=$(port); LOGIN=$(port)
{ common; echo "auth_client: { address: 127.0.0.1:$AUTH_PORT }"
  echo "services: { imap: { address: 127.0.0.1, port: $BACK }, imaps: { enabled: false } }"; } > "$D/imap.yaml"
start imap "$D/imap.yaml"
{ common; echo "auth_client: { address: 127.0.0.1:$AUTH_PORT }"
  echo "services: { imap: { address: 127.0.0.1, port: $LOGIN }, imaps: { enabled: false } }"
  echo "login: { imap: { backend_addr: 127.0.0.1:$BACK } }"; } > "$D/imap-login.yaml"
start imap-login "$D/imap-login.yaml"

S="$TMP/single"; mkdir -p "$S"
echo "alice:{PLAIN}secret::::::" > "$S/users"
DIRECT=$(port)
cat > "$S/single.yaml" <<YAML
general: { data_dir: $S, hostname: bench.invalid }
auth: { disable_plaintext_auth: false, auth_failure_delay_seconds: 0 }
imap: { auth_failure_delay_seconds: 0 }
telemetry: { listen: "" }
services:
  imap: { address: 127.0.0.1, port: $DIRECT }
  imaps: { enabled: false }
  pop3: { enabled: false }
  pop3s: { enabled: false }
  lmtp: { enabled: false }
  submission: { enabled: false }
  submissions: { enabled: false }
  managesieve: { enabled: false }
  jmap: { enabled: false }
YAML
"$YARILO" single --config "$S/single.yaml" > "$S/out" 2> "$S/err" &
PIDS+=("$!")
sleep 1.5
log "proxy 127.0.0.1:$LOGIN (imap-login -> yarilo imap), direct 127.0.0.1:$DIRECT (yarilo single)"
python3 - "$LOGIN" "$DIRECT" "$CONNS" "$SIZE_MB" "$FETCHES" <<'PY'
import socket, sys, time
proxy, direct, conns, size_mb, fetches = map(int, sys.argv[1:])

def session(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = s.makefile("rb")
    assert f.readline().startswith(b"* OK"), "greeting"
    return s, f

def cmd(s, f, line):
    tag = line.split(b" ")[0]
    s.sendall(line + b"\r\n")
    while True:
        l = f.readline()
        if not l:
            raise SystemExit("connection closed")
        if l.startswith(tag + b" "):
            assert b" OK" in l, l
            return
        if l.endswith(b"}\r\n"):
            f.read(int(l[l.rindex(b"{") + 1:-3]))

def setup_cost(port):
    t = time.perf_counter()
    for _ in range(conns):
        s, f = session(port)
        cmd(s, f, b"a LOGIN alice secret")
        cmd(s, f, b"b LOGOUT")
        s.close()
    return (time.perf_counter() - t) / conns * 1000

def throughput(port):
    s, f = session(port)
    cmd(s, f, b"a LOGIN alice secret")
    body = (b"x" * 76 + b"\r\n") * (size_mb * 1024 * 1024 // 78)
    msg = b"Subject: big\r\n\r\n" + body
    s.sendall(b"p APPEND INBOX {%d+}\r\n" % len(msg) + msg + b"\r\n")
    while not f.readline().startswith(b"p "):
        pass
    cmd(s, f, b"s SELECT INBOX")
    t = time.perf_counter()
    for i in range(fetches):
        cmd(s, f, b"f%d UID FETCH 1 BODY.PEEK[]" % i)
    secs = time.perf_counter() - t
    s.close()
    return len(msg) * fetches / secs / 1e6

p_setup, d_setup = setup_cost(proxy), setup_cost(direct)
p_tp, d_tp = throughput(proxy), throughput(direct)
print(f"connection setup (connect, LOGIN, LOGOUT), {conns} sessions:")
print(f"  through imap-login: {p_setup:.3f} ms   direct: {d_setup:.3f} ms   ratio {p_setup / d_setup:.2f}")
print(f"FETCH of a {size_mb} MB message x {fetches}:")
print(f"  through imap-login: {p_tp:.1f} MB/s   direct: {d_tp:.1f} MB/s   ratio {p_tp / d_tp:.2f}")
PY
