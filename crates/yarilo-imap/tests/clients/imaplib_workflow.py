"""A full client workflow with Python's imaplib against yarilo.

Usage: imaplib_workflow.py PORT USER PASSWORD MAILDIR
Exits non-zero (with the failing step) on any unexpected response.
"""
import imaplib
import os
import sys
import time

port, user, password, maildir = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]


def ok(res, what):
    typ, data = res
    assert typ == "OK", f"{what}: {typ} {data}"
    return data


def message(i):
    return (
        f"From: Sender {i} <sender{i}@example.org>\r\n"
        f"To: {user}@example.org\r\n"
        f"Subject: message {i}\r\n"
        f"Date: Mon, 30 Nov 2026 10:0{i}:00 +0000\r\n"
        f"Message-ID: <{i}@example.org>\r\n"
        "MIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        "\r\n"
        f"Hello, this is unique-body-{i}.\r\n"
    ).encode()


M = imaplib.IMAP4("127.0.0.1", port)
assert "IMAP4REV2" in M.capabilities and "STARTTLS" in M.capabilities, M.capabilities
ok(M.starttls(), "starttls")
ok(M.login(user, password), "login")
# imaplib keeps the pre-login list; ask again, as RFC 9051 §6.2.3 allows
# the list to change after LOGIN.
caps = ok(M.capability(), "capability after login")[0].split()
assert b"IDLE" in caps and b"IMAP4rev2" in caps, caps

names = ok(M.list(), "list")
text = b"\n".join(names)
for want in (b"INBOX", b"Sent", b"Drafts", b"Trash", b"Junk"):
    assert want in text, f"list lacks {want}: {names}"
assert b"\\Sent" in text, names

ok(M.create("Work"), "create Work")
ok(M.create("Work/Projects"), "create Work/Projects")
work = ok(M.list("\"\"", "Work*"), "list Work*")
assert len(work) == 2, work
assert any(b"\\HasChildren" in w and w.endswith(b'"/" Work') for w in work), work

data = ok(M.select("INBOX"), "select")
assert data == [b"0"], data

for i in range(1, 6):
    data = ok(M.append("INBOX", "", imaplib.Time2Internaldate(time.time()), message(i)), f"append {i}")
    assert b"APPENDUID" in data[0], data
data = ok(M.noop(), "noop")

assert ok(M.search(None, "ALL"), "search all") == [b"1 2 3 4 5"]
assert ok(M.search(None, "SUBJECT", '"message 3"'), "search subject") == [b"3"]
assert ok(M.search(None, "FROM", "sender4@example.org"), "search from") == [b"4"]
assert ok(M.search(None, "BODY", "unique-body-2"), "search body") == [b"2"]
assert ok(M.search(None, "TEXT", "unique-body-5"), "search text") == [b"5"]
assert ok(M.search(None, "UNSEEN"), "search unseen") == [b"1 2 3 4 5"]

data = ok(M.fetch("2", "(UID FLAGS RFC822.SIZE)"), "fetch size")
assert f"RFC822.SIZE {len(message(2))}".encode() in data[0], data
data = ok(M.fetch("3", "(BODY.PEEK[HEADER.FIELDS (SUBJECT)])"), "fetch header field")
assert data[0][1] == b"Subject: message 3\r\n\r\n", data
data = ok(M.fetch("1", "(BODY[])"), "fetch body")
assert data[0][1] == message(1), data
assert b"\\Seen" in data[1] or b"\\Seen" in data[0][0], data
data = ok(M.fetch("1:5", "(ENVELOPE)"), "fetch envelope")
assert b'"message 4"' in data[3], data
data = ok(M.fetch("4", "(BODYSTRUCTURE)"), "bodystructure")
assert b'("text" "plain" ("charset" "utf-8")' in data[0], data

data = ok(M.store("1", "+FLAGS", "(\\Flagged $Important)"), "store")
assert b"\\Flagged" in data[0] and b"$Important" in data[0], data
assert ok(M.uid("SEARCH", "FLAGGED"), "uid search flagged") == [b"1"]
assert ok(M.search(None, "KEYWORD", "$Important"), "search keyword") == [b"1"]

data = ok(M.copy("2", "Work"), "copy")
data = ok(M.status("Work", "(MESSAGES UIDNEXT)"), "status Work")
assert b"MESSAGES 1" in data[0], data

typ, data = M.uid("MOVE", "3", "Work/Projects")
assert typ == "OK", data
assert ok(M.search(None, "ALL"), "after move") == [b"1 2 3 4"]
data = ok(M.status("Work/Projects", "(MESSAGES)"), "status Projects")
assert b"MESSAGES 1" in data[0], data

ok(M.store("1", "+FLAGS", "(\\Deleted)"), "store deleted")
data = ok(M.expunge(), "expunge")
# imaplib also hands back the EXPUNGE the MOVE produced (message 3).
assert data == [b"3", b"1"], data
assert ok(M.search(None, "ALL"), "after expunge") == [b"1 2 3"]

# IDLE: a second session appends, then a file appears in the Maildir as
# another MTA or Dovecot would write it; both must be pushed.
N = imaplib.IMAP4("127.0.0.1", port)
ok(N.login(user, password), "second login")


def idle_until(pred, action, what, timeout=5.0):
    tag = M._new_tag().decode()
    M.send(f"{tag} IDLE\r\n".encode())
    cont = M.readline()
    assert cont.startswith(b"+"), cont
    action()
    M.sock.settimeout(timeout)
    seen = []
    start = time.time()
    try:
        while True:
            line = M.readline()
            seen.append(line)
            if pred(line):
                break
    except Exception as e:  # timeout
        raise AssertionError(f"{what}: nothing within {timeout}s, saw {seen}: {e}")
    elapsed = time.time() - start
    M.sock.settimeout(None)
    M.send(b"DONE\r\n")
    while True:
        line = M.readline()
        if line.startswith(tag.encode()):
            assert b" OK " in line, line
            break
    return elapsed


t = idle_until(lambda l: l == b"* 4 EXISTS\r\n", lambda: ok(N.append("INBOX", "", None, message(6)), "N append"), "append by another session")
print(f"idle: other session's append seen after {t:.3f}s")


def external():
    name = f"{int(time.time())}.M1P{os.getpid()}.external"
    tmp = os.path.join(maildir, "tmp", name)
    with open(tmp, "wb") as f:
        f.write(message(7))
    os.rename(tmp, os.path.join(maildir, "new", name))


t = idle_until(lambda l: l == b"* 5 EXISTS\r\n", external, "file written into new/ by another program")
print(f"idle: external delivery seen after {t:.3f}s")

t = idle_until(lambda l: b"FETCH" in l and b"\\Answered" in l, lambda: ok(N.select("INBOX") and N.store("2", "+FLAGS", "(\\Answered)"), "N store"), "flag change by another session")
print(f"idle: other session's flag change seen after {t:.3f}s")

N.logout()
ok(M.close(), "close")
typ, data = M.logout()
assert typ == "BYE", (typ, data)
print("workflow ok")
