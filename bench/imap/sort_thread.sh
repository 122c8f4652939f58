#!/usr/bin/env bash
# SORT and THREAD on one large mailbox: yarilo single vs Debian Dovecot 2.3
# on this machine, same Maildir (same files, same UIDs), same commands.
# See docs/benchmarks.md ("SORT and THREAD"). Tunables (environment):
#   MESSAGES=100000 WARM=5 SEED=1
#   NO_DOVECOT=1 (yarilo only)  KEEP_TMP=1 (keep the temp dir)
#   BENCH_TMPDIR=/var/tmp (where the temp dir goes; must not be tmpfs)
#   YARILO_EXTRA_YAML (appended to yarilo's config, e.g. an imap: section)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MESSAGES="${MESSAGES:-100000}"
WARM="${WARM:-5}"
SEED="${SEED:-1}"
DRIVER="$REPO/bench/imap/sort_thread.py"

if [ -n "${NO_DOVECOT:-}" ]; then require_tools python3; else require_tools python3 dovecot; fi
build_release
trap cleanup EXIT INT TERM
make_tmp
log "temp dir $TMP"
# The target dir may be shared with other builds: run on a copy of the
# binaries just built, so none can change under the benchmark.
mkdir -p "$TMP/bin"
cp "$YARILO" "$YARCTL" "$TMP/bin/"
YARILO="$TMP/bin/yarilo"
YARCTL="$TMP/bin/yarctl"

# One Maildir, generated once, copied to both servers before they start,
# with a dovecot-uidlist so both number the messages alike.
log "generating $MESSAGES messages (seed $SEED)"
started=$(date +%s)
python3 "$DRIVER" gen "$TMP/maildir" "$MESSAGES" "$SEED"
log "generated in $(( $(date +%s) - started ))s ($(du -sh "$TMP/maildir" | cut -f1))"

mkdir -p "$TMP/yarilo/mail"
cp -a "$TMP/maildir" "$TMP/yarilo/mail/bench1"
# The user's Maildir root is fixed here so the files can be put in place
# before the first login.
YARILO_EXTRA_YAML="store:
  mail_location: \"maildir:$TMP/yarilo/mail/%Ln\"
${YARILO_EXTRA_YAML:-}"
export YARILO_EXTRA_YAML

read -r YPORT DPORT <<<"$(free_ports 2 | tr "\n" " ")"
start_yarilo "$YPORT" 1
TARGETS=(--target "yarilo=127.0.0.1:$YPORT")
if [ -z "${NO_DOVECOT:-}" ]; then
    mkdir -p "$TMP/dovecot/home/bench1"
    cp -a "$TMP/maildir" "$TMP/dovecot/home/bench1/Maildir"
    chown -R nobody "$TMP/dovecot/home/bench1"
    start_dovecot "$DPORT" 1
    TARGETS+=(--target "dovecot=127.0.0.1:$DPORT")
fi
rm -rf "$TMP/maildir"

RESULTS="$TMP/sort_thread.json"
log "commands: cold once, then $WARM warm runs each, interleaved across servers"
python3 "$DRIVER" run "${TARGETS[@]}" --user bench1 --password "$BENCH_PASSWORD" \
    --warm "$WARM" --json "$RESULTS"

OUT="${BENCH_TMPDIR:-/var/tmp}/yarilo-sort-thread-results-$(date +%Y%m%d-%H%M%S).json"
cp "$RESULTS" "$OUT"
echo "results JSON: $OUT"
echo "yarilo RSS after the run: $(awk '/VmRSS/ {print $2, $3}' "/proc/$YARILO_PID/status" 2>/dev/null || echo '?')"
if grep -qiE 'panic|ERROR' "$TMP/yarilo/yarilo.log"; then
    echo "yarilo log has errors:" >&2
    grep -iE 'panic|ERROR' "$TMP/yarilo/yarilo.log" | head -20 >&2
fi
