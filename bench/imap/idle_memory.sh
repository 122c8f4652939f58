#!/usr/bin/env bash
# Memory per IDLE session: yarilo single with CONNS (10,000) concurrent
# plain-TCP IMAP sessions that LOGIN, SELECT INBOX and IDLE; Dovecot 2.3
# with DOVECOT_CONNS (1,000; a process per session) for comparison.
# See docs/benchmarks.md ("IMAP"). Tunables (environment):
#   CONNS=10000 DOVECOT_CONNS=1000 USERS=10 MESSAGES=20 SETTLE=5
#   NO_DOVECOT=1  KEEP_TMP=1  BENCH_TMPDIR=/var/tmp
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CONNS="${CONNS:-10000}"
DOVECOT_CONNS="${DOVECOT_CONNS:-1000}"
USERS="${USERS:-10}"
MESSAGES="${MESSAGES:-20}"
SETTLE="${SETTLE:-5}"

if [ -n "${NO_DOVECOT:-}" ]; then require_tools; else require_tools dovecot; fi
# The client holds CONNS sockets, the server as many; each process needs
# its own allowance.
want=$((CONNS + 1024))
hard="$(ulimit -Hn)"
if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ]; then
    die "ulimit -Hn is $hard; $want file descriptors are needed for CONNS=$CONNS (raise the hard limit or lower CONNS)"
fi
ulimit -n "$want"
range=($(cat /proc/sys/net/ipv4/ip_local_port_range))
if [ $((range[1] - range[0])) -lt $((CONNS + 1000)) ]; then
    die "ephemeral port range ${range[*]} too small for $CONNS connections to one port"
fi

build_release
trap cleanup EXIT INT TERM
make_tmp
log "temp dir $TMP"

# mem PID... -> "rss_kb pss_kb nproc" summed over the processes
mem() {
    local rss=0 pss=0 n=0 p v
    for p in "$@"; do
        [ -r "/proc/$p/status" ] || continue
        v=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null) || continue
        rss=$((rss + ${v:-0}))
        v=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null) || v=0
        pss=$((pss + ${v:-0}))
        n=$((n + 1))
    done
    echo "$rss $pss $n"
}
# The Dovecot master and every process it forked (all services are its
# direct children).
dovecot_pids() { echo "$DOVECOT_PID"; pgrep -P "$DOVECOT_PID" || true; }
# cpu_ticks PID... -> utime+stime summed (clock ticks)
cpu_ticks() {
    local t=0 p v
    for p in "$@"; do
        v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) || continue
        t=$((t + ${v:-0}))
    done
    echo "$t"
}
# cpu_percent PID... -> % of one core used over the next 10 s
cpu_percent() {
    local t0 t1
    t0=$(cpu_ticks "$@"); sleep 10; t1=$(cpu_ticks "$@")
    awk -v d=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", 100 * d / hz / 10}'
}

# run_idle NAME PORT CONNS -> waits until all sessions are idling; sets IDLE_PID
run_idle() {
    local name=$1 port=$2 conns=$3 out="$TMP/idle-$1.log"
    "$BENCH" idle --target "127.0.0.1:$port" --users "$USERS" --password "$BENCH_PASSWORD" \
        --conns "$conns" --ramp 200 >"$out" 2>&1 &
    IDLE_PID=$!
    PIDS+=("$IDLE_PID")
    for _ in $(seq 600); do
        grep -q '^IDLING' "$out" && break
        kill -0 "$IDLE_PID" 2>/dev/null || { cat "$out" >&2; die "imap_bench idle exited early ($name)"; }
        sleep 0.5
    done
    grep -q '^IDLING' "$out" || { cat "$out" >&2; die "$name: sessions not established within 300s"; }
    log "$name: $(grep '^IDLING' "$out" | head -1)"
    grep '^error' "$out" >&2 || true
    IDLING=$(grep '^IDLING' "$out" | head -1 | awk '{print $2}')
}

stop_idle() {
    kill "$IDLE_PID" 2>/dev/null || true
    wait "$IDLE_PID" 2>/dev/null || true
}

report() { # report NAME CONNS IDLING BASE(rss pss n) LOADED(rss pss n)
    local name=$1 conns=$2 idling=$3
    local b_rss=$4 b_pss=$5 b_n=$6 l_rss=$7 l_pss=$8 l_n=$9
    local per_rss=$(( (l_rss - b_rss) * 1024 / (idling > 0 ? idling : 1) ))
    local per_pss=$(( (l_pss - b_pss) * 1024 / (idling > 0 ? idling : 1) ))
    printf '%-8s sessions %6d/%-6d procs %5d->%-5d RSS %8d KiB -> %8d KiB  PSS %8d KiB -> %8d KiB  per session: RSS %7d B  PSS %7d B\n' \
        "$name" "$idling" "$conns" "$b_n" "$l_n" "$b_rss" "$l_rss" "$b_pss" "$l_pss" "$per_rss" "$per_pss" \
        | tee -a "$TMP/summary.txt"
    RESULT_LINES+=("{\"server\": \"$name\", \"connections\": $conns, \"idling\": $idling, \"processes_before\": $b_n, \"processes_idle\": $l_n, \"rss_kib_before\": $b_rss, \"rss_kib_idle\": $l_rss, \"pss_kib_before\": $b_pss, \"pss_kib_idle\": $l_pss, \"rss_bytes_per_session\": $per_rss, \"pss_bytes_per_session\": $per_pss${EXTRA:-}}")
    PER_PSS=$per_pss
}
RESULT_LINES=()

# ---- yarilo
read -r YPORT DPORT <<<"$(free_ports 2 | tr "\n" " ")"
start_yarilo "$YPORT" "$USERS"
"$BENCH" prefill --target "yarilo=127.0.0.1:$YPORT" --users "$USERS" --password "$BENCH_PASSWORD" \
    --messages "$MESSAGES" >&2
sleep "$SETTLE"
read -r b_rss b_pss b_n < <(mem "$YARILO_PID")
log "yarilo before: RSS ${b_rss} KiB PSS ${b_pss} KiB threads $(awk '/^Threads:/ {print $2}' /proc/$YARILO_PID/status)"
run_idle yarilo "$YPORT" "$CONNS"
sleep "$SETTLE"
read -r l_rss l_pss l_n < <(mem "$YARILO_PID")
# CPU the idling sessions cost (the Maildir is re-checked every
# imap.idle_check_interval_seconds).
YCPU=$(cpu_percent "$YARILO_PID")
log "yarilo with sessions idling: CPU ${YCPU}% of one core over 10s, fds $(ls /proc/$YARILO_PID/fd | wc -l)"
EXTRA=", \"cpu_percent_while_idle\": $YCPU" report yarilo "$CONNS" "$IDLING" "$b_rss" "$b_pss" "$b_n" "$l_rss" "$l_pss" "$l_n"
Y_IDLING=$IDLING
stop_idle
grep -iE 'panic|ERROR' "$TMP/yarilo/yarilo.log" | head -20 >&2 || true

# ---- dovecot
if [ -z "${NO_DOVECOT:-}" ]; then
    start_dovecot "$DPORT" "$USERS"
    "$BENCH" prefill --target "dovecot=127.0.0.1:$DPORT" --users "$USERS" --password "$BENCH_PASSWORD" \
        --messages "$MESSAGES" >&2
    sleep "$SETTLE"
    read -r b_rss b_pss b_n < <(mem $(dovecot_pids))
    run_idle dovecot "$DPORT" "$DOVECOT_CONNS"
    sleep "$SETTLE"
    read -r l_rss l_pss l_n < <(mem $(dovecot_pids))
    DCPU=$(cpu_percent $(dovecot_pids))
    log "dovecot with sessions idling: CPU ${DCPU}% of one core over 10s (all its processes)"
    EXTRA=", \"cpu_percent_while_idle\": $DCPU" report dovecot "$DOVECOT_CONNS" "$IDLING" "$b_rss" "$b_pss" "$b_n" "$l_rss" "$l_pss" "$l_n"
    echo "dovecot extrapolated to $CONNS sessions (linear, NOT measured): $((PER_PSS * CONNS / 1048576)) MiB PSS" | tee -a "$TMP/summary.txt"
    grep -i 'inotify' "$TMP/dovecot/dovecot.log" | head -1 >&2 || true
    stop_idle
fi

OUT="${BENCH_TMPDIR:-/var/tmp}/yarilo-imap-idle-memory-$(date +%Y%m%d-%H%M%S).json"
{ echo "["; (IFS=$'\n'; echo "${RESULT_LINES[*]}" | sed '$!s/$/,/'); echo "]"; } >"$TMP/results.json"
cp "$TMP/results.json" "$OUT"
echo "results JSON: $TMP/results.json (copied to $OUT)"
[ "$Y_IDLING" = "$CONNS" ] || { echo "warning: only $Y_IDLING of $CONNS yarilo sessions reached IDLE" >&2; }
