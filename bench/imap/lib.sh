# Shared helpers for bench/imap/run.sh and bench/imap/idle_memory.sh.
# Sourced, not run. Expects `set -euo pipefail` in the caller.

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/yarilo/target}"
# BENCH_PROFILE=debug runs the debug build (counts of failed commands,
# not throughput: the ratio against a release Dovecot means nothing then).
BENCH_PROFILE="${BENCH_PROFILE:-release}"
case "$BENCH_PROFILE" in
    release) PROFILE_FLAG=(--release) ;;
    debug) PROFILE_FLAG=() ;;
    *) echo "BENCH_PROFILE must be release or debug" >&2; exit 2 ;;
esac
REL="$CARGO_TARGET_DIR/$BENCH_PROFILE"
DOVECOT_BIN="${DOVECOT_BIN:-/usr/sbin/dovecot}"
BENCH_PASSWORD="bench-pass"

die() { echo "error: $*" >&2; exit 1; }
log() { echo "== $*" >&2; }

require_tools() {
    command -v cargo >/dev/null || die "cargo not found (run scripts/setup-dev)"
    for t in "$@"; do
        case "$t" in
            dovecot)
                [ -x "$DOVECOT_BIN" ] || die "$DOVECOT_BIN not found: install Dovecot 2.3 (run scripts/setup-dev: dovecot-core, dovecot-imapd)"
                [ -x /usr/lib/dovecot/imap ] || die "/usr/lib/dovecot/imap not found: install dovecot-imapd (run scripts/setup-dev)"
                id -u nobody >/dev/null 2>&1 || die "user 'nobody' is needed for the Dovecot mail uid"
                [ "$(id -u)" = 0 ] || die "Dovecot side needs root here (it runs its login processes as dovenull); run as root or set NO_DOVECOT=1"
                ;;
            *) command -v "$t" >/dev/null || die "$t not found" ;;
        esac
    done
}

build_release() {
    log "building $BENCH_PROFILE binaries (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
    (cd "$REPO" && cargo build "${PROFILE_FLAG[@]}" -p yarilo -p yarctl -q \
        && cargo build "${PROFILE_FLAG[@]}" -p yarilo-imap --example imap_bench -q) \
        || die "cargo build failed"
    YARILO="$REL/yarilo"
    YARCTL="$REL/yarctl"
    BENCH="$REL/examples/imap_bench"
    for b in "$YARILO" "$YARCTL" "$BENCH"; do [ -x "$b" ] || die "missing $b after build"; done
}

# Processes started here, stopped by cleanup (by PID, never by name).
PIDS=()
DOVECOT_CONF=""
TMP=""

cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    [ "$rc" = 0 ] || echo "error: $(basename "$0") failed (exit $rc) at line ${BASH_LINENO[0]:-?}" >&2
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null
    done
    if [ -n "$DOVECOT_CONF" ] && [ -f "$DOVECOT_CONF" ]; then
        "$DOVECOT_BIN" -c "$DOVECOT_CONF" stop >/dev/null 2>&1
    fi
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] || continue
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null
    done
    wait 2>/dev/null
    if [ -n "$TMP" ] && [ -d "$TMP" ]; then
        if [ -n "${KEEP_TMP:-}" ]; then
            echo "kept $TMP" >&2
        else
            rm -rf "$TMP"
        fi
    fi
    exit $rc
}

make_tmp() {
    # On disk (not tmpfs), so fsync costs what it costs in production.
    local base="${BENCH_TMPDIR:-/var/tmp}"
    TMP="$(mktemp -d "$base/yarilo-imap-bench.XXXXXX")"
    chmod 755 "$TMP"   # Dovecot's mail uid (nobody) must traverse it
}

free_ports() { "$BENCH" freeport "$1"; }

wait_port() { # wait_port PORT NAME LOGFILE
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    cat "$3" >&2 || true
    die "$2 did not listen on 127.0.0.1:$1 (log above)"
}

# start_yarilo PORT USERS -> sets YARILO_PID
start_yarilo() {
    local port=$1 users=$2
    mkdir -p "$TMP/yarilo"
    cat >"$TMP/yarilo/config.yaml" <<EOF
general:
  data_dir: $TMP/yarilo/data
  shutdown_grace_seconds: 2
services:
  imap:        { address: 127.0.0.1, port: $port, ssl_mode: "no" }
  imaps:       { enabled: false }
  pop3:        { enabled: false }
  pop3s:       { enabled: false }
  lmtp:        { enabled: false }
  submission:  { enabled: false }
  submissions: { enabled: false }
  managesieve: { enabled: false }
  jmap:        { enabled: false }
telemetry:
  listen: ""
EOF
    # Extra YAML (top-level sections not written above), e.g.
    # YARILO_EXTRA_YAML=$'imap:\n  idle_check_interval_seconds: 30'
    [ -z "${YARILO_EXTRA_YAML:-}" ] || printf '%s\n' "$YARILO_EXTRA_YAML" >>"$TMP/yarilo/config.yaml"
    for i in $(seq "$users"); do
        "$YARCTL" user add "bench$i" --password "$BENCH_PASSWORD" --scheme PLAIN \
            --data "$TMP/yarilo/data" >/dev/null || die "yarctl user add bench$i failed"
    done
    "$YARILO" single --config "$TMP/yarilo/config.yaml" --data "$TMP/yarilo/data" \
        >"$TMP/yarilo/yarilo.log" 2>&1 &
    YARILO_PID=$!
    PIDS+=("$YARILO_PID")
    wait_port "$port" yarilo "$TMP/yarilo/yarilo.log"
    log "yarilo single pid $YARILO_PID on 127.0.0.1:$port (log $TMP/yarilo/yarilo.log)"
}

# start_dovecot PORT USERS -> sets DOVECOT_PID (the master)
start_dovecot() {
    local port=$1 users=$2 d="$TMP/dovecot"
    mkdir -p "$d/run" "$d/state" "$d/home"
    chown nobody:nogroup "$d/home" 2>/dev/null || chown nobody "$d/home"
    : >"$d/passwd"
    for i in $(seq "$users"); do
        echo "bench$i:{PLAIN}$BENCH_PASSWORD" >>"$d/passwd"
    done
    DOVECOT_CONF="$d/dovecot.conf"
    cat >"$DOVECOT_CONF" <<EOF
# Minimal Dovecot 2.3 for the side-by-side benchmark; stock settings
# except paths, limits and durability.
instance_name = yarilo-imap-bench-$$
base_dir = $d/run
state_dir = $d/state
log_path = $d/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain
first_valid_uid = 1
mail_location = maildir:~/Maildir
mail_fsync = always
default_process_limit = 2500
default_client_limit = 6000
passdb {
  driver = passwd-file
  args = scheme=PLAIN username_format=%u $d/passwd
}
userdb {
  driver = static
  args = uid=nobody gid=$(id -gn nobody) home=$d/home/%u
}
service anvil {
  client_limit = 20000
}
service imap-login {
  inet_listener imap {
    address = 127.0.0.1
    port = $port
  }
  inet_listener imaps {
    port = 0
  }
}
protocol imap {
  mail_max_userip_connections = 100000
}
EOF
    "$DOVECOT_BIN" -c "$DOVECOT_CONF" 2>>"$d/dovecot.log" || { cat "$d/dovecot.log" >&2; die "dovecot failed to start"; }
    for _ in $(seq 50); do [ -s "$d/run/master.pid" ] && break; sleep 0.1; done
    DOVECOT_PID="$(cat "$d/run/master.pid" 2>/dev/null)" || die "dovecot wrote no master.pid"
    PIDS+=("$DOVECOT_PID")
    wait_port "$port" dovecot "$d/dovecot.log"
    # The login process answers "Waiting for authentication process" until
    # auth is up; one warm-up login avoids measuring that.
    sleep 1
    log "dovecot $("$DOVECOT_BIN" --version) master pid $DOVECOT_PID on 127.0.0.1:$port (log $d/dovecot.log)"
}
