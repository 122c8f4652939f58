#!/usr/bin/env python3
"""SORT/THREAD benchmark helper for bench/imap/sort_thread.sh.

  sort_thread.py gen DIR COUNT [SEED]
      Writes a Maildir (cur/, new/, tmp/ and a dovecot-uidlist giving
      UIDs 1..COUNT in generation order) of COUNT generated messages with
      varied headers: reply and forward chains (Re:/Fwd:/[list] tags,
      References and In-Reply-To), senders with and without display
      names (some RFC 2047-encoded), Date headers out of arrival order in
      several time zones (a few missing or broken), a few duplicate or
      missing Message-IDs. Deterministic for a SEED. File mtimes carry the
      arrival time (Maildir INTERNALDATE).

  sort_thread.py run --target NAME=HOST:PORT ... --user U --password P
                     [--warm N] [--json FILE]
      For each target: LOGIN, SELECT INBOX (timed: the first open may
      build an index), then each command once (cold) and N more times
      (warm), interleaved across targets command by command. Prints a
      table (cold, warm median, warm min) and the ratio of the first
      target to the second, and whether the servers' answers agree.

Only the standard library is used (imaplib).
"""

import imaplib
import json
import os
import random
import statistics
import sys
import time

COMMANDS = [
    ("SORT (DATE)", ("sort", "(DATE)")),
    ("SORT (SUBJECT)", ("sort", "(SUBJECT)")),
    ("SORT (FROM)", ("sort", "(FROM)")),
    ("SORT (REVERSE ARRIVAL)", ("sort", "(REVERSE ARRIVAL)")),
    ("SORT (REVERSE DATE)", ("sort", "(REVERSE DATE)")),
    ("THREAD REFERENCES", ("thread", "REFERENCES")),
    ("THREAD ORDEREDSUBJECT", ("thread", "ORDEREDSUBJECT")),
]

WORDS = (
    "budget meeting report quarterly release plan review draft invoice "
    "server outage update question lunch project deadline schedule patch "
    "kernel build failure migration backup storage network design proposal "
    "contract travel holiday party hiring interview feedback roadmap bug "
    "security audit license customer support ticket newsletter weekly "
    "notes minutes agenda offsite training workshop conference paper"
).split()
FIRST = (
    "Anna Bob Carla Dmitri Emil Fatima Georg Hana Ivan Jana Karl Lena Mike "
    "Nora Olaf Petra Quinn Rosa Sven Tanja Uwe Vera Walter Xenia Yuri Zoe"
).split()
LAST = (
    "Novak Smith Müller Ivanova Kowalski Garcia Rossi Dubois Jensen Horvat "
    "Petrov Schmidt Lindqvist Okafor Tanaka Silva Nagy Popescu"
).split()
DOMAINS = ["example.org", "mail.example.com", "lists.example.net", "corp.example",
           "uni.example.edu"]
LISTS = ["[dev]", "[ops]", "[announce]", "[Bug 4711]", "[PATCH]", "[PATCH v2]"]
ZONES = ["+0000", "+0100", "+0200", "-0500", "-0800", "+0530", "+0900", "-0300"]
DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
          "Nov", "Dec"]


def encoded_word(s):
    import base64
    return "=?UTF-8?B?" + base64.b64encode(s.encode()).decode() + "?="


def rfc2822_date(ts, zone):
    sign = 1 if zone[0] == "+" else -1
    off = sign * (int(zone[1:3]) * 3600 + int(zone[3:5]) * 60)
    t = time.gmtime(ts + off)
    return "%s, %02d %s %04d %02d:%02d:%02d %s" % (
        DAYS[t.tm_wday], t.tm_mday, MONTHS[t.tm_mon - 1], t.tm_year,
        t.tm_hour, t.tm_min, t.tm_sec, zone)


def gen(root, count, seed):
    rnd = random.Random(seed)
    for d in ("cur", "new", "tmp"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    people = []
    for i in range(2000):
        f, l = rnd.choice(FIRST), rnd.choice(LAST)
        addr = "%s.%s%d@%s" % (f.lower(), l.lower().replace("ü", "ue"), i,
                               rnd.choice(DOMAINS))
        style = rnd.random()
        if style < 0.2:
            people.append(addr)
        elif style < 0.3:
            people.append("%s <%s>" % (encoded_word(f + " " + l), addr))
        elif style < 0.4:
            people.append('"%s, %s" <%s>' % (l, f, addr))
        else:
            people.append("%s %s <%s>" % (f, l, addr))
    start = 1_640_995_200  # 2022-01-01
    arrival = start
    msgs = []  # (message-id, references list, base subject)
    uidlist = ["3 V1700000000 N%d" % (count + 1)]
    for n in range(count):
        arrival += rnd.randint(1, 900)
        parent = None
        if msgs and rnd.random() < 0.6:
            # Replies mostly go to recent messages, as in a real mailbox.
            back = min(len(msgs), int(rnd.expovariate(1 / 200)) + 1)
            parent = msgs[-back]
        if parent is None:
            subject = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(2, 6)))
            if rnd.random() < 0.15:
                subject = rnd.choice(LISTS) + " " + subject
            base = subject
            refs = []
            shown = subject
        else:
            base = parent[2]
            refs = (parent[1] + [parent[0]])[-20:]
            r = rnd.random()
            if r < 0.7:
                shown = "Re: " + base
            elif r < 0.8:
                shown = "RE: Re: " + base
            elif r < 0.9:
                shown = "Fwd: " + base
            elif r < 0.95:
                shown = "Re: [fwd: " + base + "]"
            else:
                shown = base + " (fwd)"
        mid = "<%d.%d@%s>" % (n, rnd.randint(0, 1 << 30), rnd.choice(DOMAINS))
        if rnd.random() < 0.002 and msgs:
            mid = msgs[-1][0]  # duplicate Message-ID
        sent = arrival - rnd.randint(0, 7200)
        if rnd.random() < 0.05:
            sent -= rnd.randint(0, 86400 * 30)  # delayed in transit
        hdr = []
        hdr.append("Return-Path: <bounce@example.org>")
        hdr.append("Received: from mx.example.org by mail.example.org; %s"
                   % rfc2822_date(arrival, "+0000"))
        hdr.append("From: " + rnd.choice(people))
        hdr.append("To: " + ", ".join(rnd.choice(people) for _ in range(rnd.randint(1, 3))))
        if rnd.random() < 0.3:
            hdr.append("Cc: " + rnd.choice(people))
        hdr.append("Subject: " + shown)
        r = rnd.random()
        if r < 0.01:
            pass  # no Date: sorts by INTERNALDATE
        elif r < 0.015:
            hdr.append("Date: sometime last week")
        else:
            hdr.append("Date: " + rfc2822_date(sent, rnd.choice(ZONES)))
        if rnd.random() > 0.003:
            hdr.append("Message-ID: " + mid)
        if parent is not None:
            r = rnd.random()
            if r < 0.8:
                hdr.append("In-Reply-To: " + parent[0])
                hdr.append("References: " + " ".join(refs))
            elif r < 0.95:
                hdr.append("In-Reply-To: " + parent[0])
            else:
                hdr.append("References: " + " ".join(refs))
        hdr.append("MIME-Version: 1.0")
        hdr.append("Content-Type: text/plain; charset=utf-8")
        body_lines = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(5, 14)))
                      for _ in range(rnd.randint(3, 30))]
        text = ("\n".join(hdr) + "\n\n" + "\n".join(body_lines) + "\n").encode()
        size = len(text)
        vsize = size + text.count(b"\n")
        base_name = "%d.M%dP1000.bench" % (arrival, n)
        # The uidlist names files without their ":2,<flags>" info, as
        # Dovecot writes it.
        base_name = "%s,S=%d,W=%d" % (base_name, size, vsize)
        name = base_name + ":2,"
        if rnd.random() < 0.5:
            name += "S"
        path = os.path.join(root, "cur", name)
        with open(path, "wb") as f:
            f.write(text)
        os.utime(path, (arrival, arrival))
        uidlist.append("%d :%s" % (n + 1, base_name))
        msgs.append((mid, refs, base))
        if len(msgs) > 5000:
            del msgs[:1000]
    with open(os.path.join(root, "dovecot-uidlist"), "w") as f:
        f.write("\n".join(uidlist) + "\n")


def connect(hostport, user, password):
    host, port = hostport.rsplit(":", 1)
    m = imaplib.IMAP4(host, int(port), timeout=3600)
    m.login(user, password)
    return m


def one(m, kind, arg):
    t = time.perf_counter()
    if kind == "sort":
        typ, data = m.sort(arg, "UTF-8", "ALL")
    else:
        typ, data = m.thread(arg, "UTF-8", "ALL")
    dt = time.perf_counter() - t
    if typ != "OK":
        raise SystemExit("%s %s failed: %r" % (kind, arg, data))
    return dt, b" ".join(d for d in data if d)


def run(argv):
    targets, user, password, warm, out = [], None, None, 5, None
    it = iter(argv)
    for a in it:
        if a == "--target":
            name, hp = next(it).split("=", 1)
            targets.append((name, hp))
        elif a == "--user":
            user = next(it)
        elif a == "--password":
            password = next(it)
        elif a == "--warm":
            warm = int(next(it))
        elif a == "--json":
            out = next(it)
        else:
            raise SystemExit("unknown argument " + a)
    imaplib._MAXLINE = 64 << 20  # SORT/THREAD of 100k messages is one long line
    conns, results = {}, {"select": {}, "commands": []}
    for name, hp in targets:
        m = connect(hp, user, password)
        t = time.perf_counter()
        typ, data = m.select("INBOX", readonly=True)
        results["select"][name] = time.perf_counter() - t
        print("%-8s SELECT INBOX: %s messages in %.3f s" % (
            name, data[0].decode(), results["select"][name]), flush=True)
        conns[name] = m
    for label, (kind, arg) in COMMANDS:
        row = {"command": label, "cold": {}, "warm": {}, "same_answer": None}
        answers = {}
        for name, _ in targets:
            dt, ans = one(conns[name], kind, arg)
            row["cold"][name] = dt
            answers[name] = ans
        for _ in range(warm):
            for name, _ in targets:
                dt, ans = one(conns[name], kind, arg)
                row["warm"].setdefault(name, []).append(dt)
        if len(targets) > 1:
            row["same_answer"] = len(set(answers.values())) == 1
        results["commands"].append(row)
        print("%-24s %s" % (label, "  ".join(
            "%s cold %.3f s warm median %.3f s" % (
                n, row["cold"][n], statistics.median(row["warm"].get(n, [row["cold"][n]])))
            for n, _ in targets)), flush=True)
    for m in conns.values():
        m.logout()
    names = [n for n, _ in targets]
    print()
    head = "%-24s" % "command"
    for n in names:
        head += " %11s %11s %11s" % (n + " cold", n + " warm", n + " min")
    if len(names) > 1:
        head += " %10s %10s %6s" % ("ratio cold", "ratio warm", "same")
    print(head)
    for row in results["commands"]:
        line = "%-24s" % row["command"]
        for n in names:
            w = row["warm"].get(n, [row["cold"][n]])
            line += " %10.3fs %10.3fs %10.3fs" % (row["cold"][n], statistics.median(w), min(w))
        if len(names) > 1:
            a, b = names[0], names[1]
            wa = statistics.median(row["warm"].get(a, [row["cold"][a]]))
            wb = statistics.median(row["warm"].get(b, [row["cold"][b]]))
            row["ratio_cold"] = row["cold"][a] / row["cold"][b]
            row["ratio_warm"] = wa / wb
            line += " %10.2f %10.2f %6s" % (row["ratio_cold"], row["ratio_warm"],
                                           "yes" if row["same_answer"] else "no")
        print(line)
    if len(names) > 1:
        print("(ratio = %s time / %s time; below 1 means %s is faster)" % (
            names[0], names[1], names[0]))
    if out:
        with open(out, "w") as f:
            json.dump(results, f, indent=1)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "gen":
        seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
        gen(sys.argv[2], int(sys.argv[3]), seed)
    elif len(sys.argv) >= 2 and sys.argv[1] == "run":
        run(sys.argv[2:])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
