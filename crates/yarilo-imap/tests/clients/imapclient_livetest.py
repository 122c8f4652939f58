#!/usr/bin/env python3
"""Runs IMAPClient's own live test suite (imapclient 2.3.1,
imapclient.livetest: folders, subscriptions, STATUS, IDLE, APPEND, flags,
SEARCH with MODSEQ, SORT, THREAD, COPY, FETCH with modifiers,
BODYSTRUCTURE, EXPUNGE, each with and without UIDs) against a server.

Fails on any failure or error, and on any skip other than the ones for
capabilities the server does not claim (XLIST, ACL, Gmail extensions).

usage: imapclient_livetest.py <port> <user> <password>
"""
import os
import re
import subprocess
import sys
import tempfile

try:
    import imapclient
except ImportError:
    sys.exit("imapclient is missing: run scripts/setup-dev")
if imapclient.__version__ != "2.3.1":
    sys.exit(f"imapclient {imapclient.__version__}: the live suite ships with 2.3.1; run scripts/setup-dev")

port, user, password = sys.argv[1:4]
NOT_CLAIMED = {
    "Server doesn't support XLIST",
    "Server doesn't support ACL",
    "Server doesn't support labels",
    "Server doesn't support Gmail search",
}

with tempfile.TemporaryDirectory() as d:
    ini = os.path.join(d, "livetest.ini")
    with open(ini, "w") as f:
        f.write(
            "[DEFAULT]\nhost = 127.0.0.1\nport = %s\nssl = false\nstarttls = false\n"
            "username = %s\npassword = %s\n" % (port, user, password)
        )
    r = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "imapclient.livetest", ini, "-v"],
        capture_output=True,
        text=True,
        timeout=600,
    )
out = r.stdout + r.stderr
ran = re.search(r"^Ran (\d+) tests?", out, re.M)
skips = re.findall(r"\.\.\. skipped (['\"])(.*)\1$", out, re.M)
reasons = [s[1] for s in skips]
unexpected = sorted(set(reasons) - NOT_CLAIMED)
if r.returncode != 0 or not ran or unexpected:
    print(out)
    if unexpected:
        print("skipped for a capability the server claims or should: %s" % unexpected)
    sys.exit(1)
print(
    "imapclient livetest: %s tests, 0 failures, %d skipped (%s)"
    % (ran.group(1), len(reasons), ", ".join(sorted(set(reasons))))
)
