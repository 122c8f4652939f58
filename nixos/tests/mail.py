# Mail client for the NixOS VM tests: deliver over LMTP, read over IMAP.
#   mail.py deliver HOST PORT RCPT SUBJECT
#   mail.py read HOST PORT USER PASSWORD SUBJECT   (STARTTLS, exits 1 if absent)
import imaplib
import smtplib
import ssl
import sys

cmd = sys.argv[1]
if cmd == "deliver":
    host, port, rcpt, subject = sys.argv[2:6]
    s = smtplib.LMTP(host, int(port), timeout=30)
    refused = s.sendmail(
        "sender@example.org",
        [rcpt],
        f"From: sender@example.org\r\nTo: {rcpt}\r\nSubject: {subject}\r\n\r\nhello\r\n",
    )
    s.quit()
    assert not refused, refused
elif cmd == "read":
    host, port, user, password, subject = sys.argv[2:7]
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    m = imaplib.IMAP4(host, int(port), timeout=30)
    m.starttls(ssl_context=ctx)
    m.login(user, password)
    typ, _ = m.select("INBOX")
    assert typ == "OK", typ
    typ, data = m.search(None, "SUBJECT", f'"{subject}"')
    assert typ == "OK" and data[0].split(), (typ, data)
    m.logout()
else:
    sys.exit(f"unknown command {cmd}")
