#!/usr/bin/env bash
# Director ring convergence with the DEFAULT intervals (release build):
# 3 and 5 `yarilo director` processes on distinct loopback addresses
# (127.0.0.61.., one port each), seeded with each other, static
# mail_servers on fake IPs. For each ring: formation, then ROUNDS rounds
# of kill -9, restart, SIGTERM, restart, SIGSTOP, SIGCONT. After each step
# it measures the time until every live member's admin API
# (`/api/director/members`) reports exactly the live members with the same
# incarnations, then checks that every live member answers LOOKUP for 200
# users with the same backends. Prints min / median / max per step.
#
#   bench/director/ring.sh              # sizes 3 and 5, 3 rounds
#   SIZES="3" ROUNDS=5 bench/director/ring.sh
#   KEEP_TMP=1 bench/director/ring.sh   # keep configs and logs
#   YARILO=path/to/yarilo bench/director/ring.sh   # that binary, no build
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/yarilo/target}"
SIZES="${SIZES:-3 5}"
ROUNDS="${ROUNDS:-3}"
die() { echo "error: $*" >&2; exit 1; }
command -v python3 >/dev/null || die "python3 not found (run scripts/setup-dev)"
if [ -z "${YARILO:-}" ]; then
    echo "== building release yarilo (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)" >&2
    (cd "$REPO" && cargo build --release -p yarilo --bin yarilo -q) || die "cargo build failed"
    YARILO="$CARGO_TARGET_DIR/release/yarilo"
fi
[ -x "$YARILO" ] || die "$YARILO is not executable"
TMP="$(mktemp -d /var/tmp/yarilo-ring-bench.XXXXXX)"
cleanup() {
    if [ -n "${KEEP_TMP:-}" ]; then echo "kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
# The Python side starts every director itself and ends each by PID.
python3 - "$YARILO" "$TMP" "$ROUNDS" $SIZES <<'PY'
import json, os, signal, socket, statistics, subprocess, sys, time, urllib.request

yarilo, tmp, rounds, sizes = sys.argv[1], sys.argv[2], int(sys.argv[3]), [int(s) for s in sys.argv[4:]]
SECRET, TOKEN, USERS, WAIT = "ring-bench-secret", "ring-bench-token", 200, 180.0
BACKENDS = ["127.1.0.1", "127.1.0.2", "127.1.0.3"]
procs = []  # every Popen started here, ended in `finally`

def free_port(ip):
    s = socket.socket(); s.bind((ip, 0)); p = s.getsockname()[1]; s.close(); return p

class Member:
    def __init__(self, ip, port, peers):
        self.ip, self.port, self.runs, self.proc, self.stopped = ip, port, 0, None, False
        self.addr = f"{ip}:{port}"
        self.config = os.path.join(tmp, f"{ip}.yaml")
        data = os.path.join(tmp, ip); os.makedirs(data, exist_ok=True)
        servers = "".join(f"    - host: {b}\n      port: 10143\n" for b in BACKENDS)
        # Only what the ring needs; every interval is left at its default.
        open(self.config, "w").write(
            f"general:\n  data_dir: {data}\ntelemetry:\n  listen: \"\"\n"
            f"director_service:\n  listen: {self.addr}\n  ring_secret: {SECRET}\n"
            f"  peers: [{', '.join(peers)}]\n  mail_servers:\n{servers}"
            f"  api:\n    listen: {ip}:0\n    token: {TOKEN}\n")

    def live(self):
        return self.proc is not None and not self.stopped

    def start(self):
        self.runs += 1
        out = os.path.join(tmp, f"{self.ip}-run{self.runs}.out")
        err = open(os.path.join(tmp, f"{self.ip}-run{self.runs}.log"), "w")
        self.proc = subprocess.Popen([yarilo, "director", "--config", self.config],
                                     stdout=open(out, "w"), stderr=err)
        procs.append(self.proc)
        self.stopped = False
        deadline = time.time() + 30
        while time.time() < deadline:
            for line in open(out):
                if line.strip().startswith("admin api"):
                    self.api = line.split()[-1]
                    return
            if self.proc.poll() is not None:
                sys.exit(f"{self.addr} exited: see {err.name}")
            time.sleep(0.02)
        sys.exit(f"{self.addr} never announced its admin API")

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def view(self):
        req = urllib.request.Request(self.api + "/api/director/members",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                return sorted((m["addr"], m["incarnation"]) for m in json.load(r))
        except OSError:
            return None

def converge(ring, step, since):
    want = sorted(m.addr for m in ring if m.live())
    deadline = time.time() + WAIT
    while True:
        views = [(m.addr, m.view()) for m in ring if m.live()]
        first = views[0][1]
        if first and [a for a, _ in first] == want and all(v == first for _, v in views):
            return time.monotonic() - since, dict(first)
        if time.time() > deadline:
            sys.exit(f"{step}: {want} did not agree within {WAIT} s; views: {views}")
        time.sleep(0.02)

def lookups(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=20)
    f = s.makefile("rb")
    assert f.readline().startswith(b"VERSION\tdirector\t1\t")
    s.sendall(b"VERSION\tdirector\t1\t0\n" + b"".join(b"LOOKUP\tring-user-%d\t\n" % i for i in range(USERS)))
    out = []
    for i in range(USERS):
        f_ = f.readline().rstrip(b"\n").split(b"\t")
        assert f_[0] == b"OK", (addr, i, f_)
        out.append(f_[1])
    s.close()
    return out

def lookups_agree(ring, step):
    answers = [(m.addr, lookups(m.addr)) for m in ring if m.live()]
    for addr, got in answers[1:]:
        for i, (a, b) in enumerate(zip(answers[0][1], got)):
            if a != b:
                sys.exit(f"{step}: ring-user-{i} on {a} for {answers[0][0]} but {b} for {addr}")

def wait_exit(proc, addr, within):
    try:
        proc.wait(timeout=within)
    except subprocess.TimeoutExpired:
        sys.exit(f"{addr} still running {within} s after SIGTERM")

def run(n, base):
    ips = [f"127.0.0.{base + i}" for i in range(n)]
    addrs = [(ip, free_port(ip)) for ip in ips]
    peers = [f"{ip}:{p}" for ip, p in addrs]
    ring = [Member(ip, p, peers) for ip, p in addrs]
    times = {}
    def step(name, since):
        took, view = converge(ring, f"{n} members, {name}", since)
        times.setdefault(name, []).append(took)
        lookups_agree(ring, f"{n} members, {name}")
        return view
    t = time.monotonic()
    for m in ring:
        m.start()
    view = step("formation", t)
    victim, leaver, hung = ring[n // 2], ring[0], ring[n - 1]
    for _ in range(rounds):
        old = view[victim.addr]
        t = time.monotonic(); victim.signal(signal.SIGKILL); victim.proc.wait(); victim.proc = None
        step("kill -9", t)
        t = time.monotonic(); victim.start()
        view = step("restart after kill -9", t)
        assert view[victim.addr] > old, "restart: a higher incarnation"
        t = time.monotonic(); leaver.signal(signal.SIGTERM); p = leaver.proc; leaver.proc = None
        step("SIGTERM", t)
        wait_exit(p, leaver.addr, 60)
        times.setdefault("SIGTERM: process exit", []).append(time.monotonic() - t)
        t = time.monotonic(); leaver.start()
        view = step("restart after SIGTERM", t)
        old = view[hung.addr]
        t = time.monotonic(); hung.signal(signal.SIGSTOP); hung.stopped = True
        step("SIGSTOP", t)
        t = time.monotonic(); hung.signal(signal.SIGCONT); hung.stopped = False
        view = step("SIGCONT", t)
        assert view[hung.addr] > old, "SIGCONT: tombstone refuted with a higher incarnation"
    for m in ring:
        if m.proc is not None:
            m.signal(signal.SIGKILL); m.proc.wait(); m.proc = None
    return times

try:
    results = [(n, run(n, 61 + 10 * k)) for k, n in enumerate(sizes)]
finally:
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()

print(f"director ring convergence, default intervals, {rounds} rounds "
      f"(seconds until every live member reports the same member set; min / median / max)")
for n, times in results:
    print(f"{n} members:")
    for name, ts in times.items():
        print(f"  {name:<24} {min(ts):7.2f} {statistics.median(ts):7.2f} {max(ts):7.2f}")
PY
