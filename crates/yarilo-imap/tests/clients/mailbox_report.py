"""Prints a JSON report of a user's mailboxes over IMAP: per mailbox the
message count, duplicate Message-IDs, and which Message-IDs carry which
flags. Optional actions before the report:
  --flag MAILBOX MESSAGE-ID FLAG    add FLAG to that message
  --append MAILBOX MESSAGE-ID       append a small message

Usage: mailbox_report.py PORT USER PASSWORD [actions...]
"""
import imaplib
import json
import re
import sys

port, user, password = int(sys.argv[1]), sys.argv[2], sys.argv[3]
args = sys.argv[4:]
M = imaplib.IMAP4("127.0.0.1", port)
M.login(user, password)


def message_ids(mailbox):
    typ, data = M.select(f'"{mailbox}"')
    assert typ == "OK", data
    typ, data = M.uid("FETCH", "1:*", "(FLAGS BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])")
    assert typ == "OK", data
    out = []
    for item in data:
        if not isinstance(item, tuple):
            continue
        meta, header = item
        uid = int(re.search(rb"UID (\d+)", meta).group(1))
        flags = re.search(rb"FLAGS \(([^)]*)\)", meta)
        flags = flags.group(1).decode().split() if flags else []
        mid = header.decode(errors="replace").split(":", 1)[-1].strip()
        out.append((uid, mid, flags))
    return out


while args:
    if args[0] == "--flag":
        mailbox, mid, flag = args[1:4]
        args = args[4:]
        for uid, m, _ in message_ids(mailbox):
            if m == mid:
                typ, data = M.uid("STORE", str(uid), "+FLAGS", f"({flag})")
                assert typ == "OK", data
    elif args[0] == "--append":
        mailbox, mid = args[1:3]
        args = args[3:]
        msg = f"From: remote@example.org\r\nSubject: remote\r\nMessage-ID: {mid}\r\n\r\nadded on the server\r\n"
        typ, data = M.append(f'"{mailbox}"', "", None, msg.encode())
        assert typ == "OK", data
    else:
        raise SystemExit(f"unknown action {args[0]}")

report = {}
typ, boxes = M.list()
for line in boxes:
    name = line.decode().rsplit('"/" ', 1)[-1].strip('"')
    if "\\Noselect" in line.decode() or "\\NonExistent" in line.decode():
        continue
    msgs = message_ids(name)
    ids = [m for _, m, _ in msgs]
    report[name] = {
        "count": len(msgs),
        "duplicates": sorted({m for m in ids if ids.count(m) > 1}),
        "flags": {m: f for _, m, f in msgs if f},
    }
M.logout()
print(json.dumps(report))
