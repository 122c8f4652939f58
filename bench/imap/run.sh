#!/usr/bin/env bash
# Side-by-side IMAP benchmark: yarilo single vs Debian Dovecot 2.3 on this
# machine, same users, same pre-filled mailboxes, same workload.
# See docs/benchmarks.md ("IMAP"). Tunables (environment):
#   USERS=16 MESSAGES=200 MSG_SIZE=4096 LEVELS=1,8,32 DURATION=20
#   MIX=login (short sessions) or expunge (long-lived sessions sharing
#   mailboxes, with STORE \Deleted + EXPUNGE; e.g. USERS=10 LEVELS=50)
#   NO_DOVECOT=1 (yarilo only)  KEEP_TMP=1 (keep the temp dir)
#   BENCH_TMPDIR=/var/tmp (where the temp dir goes; must not be tmpfs)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

USERS="${USERS:-16}"
MESSAGES="${MESSAGES:-200}"
MSG_SIZE="${MSG_SIZE:-4096}"
LEVELS="${LEVELS:-1,8,32}"
DURATION="${DURATION:-20}"
MIX="${MIX:-login}"

if [ -n "${NO_DOVECOT:-}" ]; then require_tools; else require_tools dovecot; fi
build_release
trap cleanup EXIT INT TERM
make_tmp
log "temp dir $TMP"

read -r YPORT DPORT <<<"$(free_ports 2 | tr "\n" " ")"
start_yarilo "$YPORT" "$USERS"
TARGETS=(--target "yarilo=127.0.0.1:$YPORT")
if [ -z "${NO_DOVECOT:-}" ]; then
    start_dovecot "$DPORT" "$USERS"
    TARGETS+=(--target "dovecot=127.0.0.1:$DPORT")
fi

COMMON=(--users "$USERS" --password "$BENCH_PASSWORD" --messages "$MESSAGES" --msg-size "$MSG_SIZE")
log "prefill: $USERS users x $MESSAGES messages of ~$MSG_SIZE B (IMAP APPEND)"
"$BENCH" prefill "${TARGETS[@]}" "${COMMON[@]}"

RESULTS="$TMP/results.json"
log "load: levels $LEVELS, ${DURATION}s each, interleaved across servers"
"$BENCH" load "${TARGETS[@]}" "${COMMON[@]}" --levels "$LEVELS" --duration "$DURATION" \
    --mix "$MIX" --json "$RESULTS"

# The temp dir goes with the trap; keep the JSON next to it.
OUT="${BENCH_TMPDIR:-/var/tmp}/yarilo-imap-bench-results-$(date +%Y%m%d-%H%M%S).json"
cp "$RESULTS" "$OUT"
echo "results JSON: $RESULTS (copied to $OUT, the temp dir is removed on exit unless KEEP_TMP=1)"
if grep -qiE 'panic|ERROR' "$TMP/yarilo/yarilo.log"; then
    echo "yarilo log has errors:" >&2
    grep -iE 'panic|ERROR' "$TMP/yarilo/yarilo.log" | head -20 >&2
fi
