"""What goes into each image. docs/images.md describes the result.

The yarilo image carries the binaries, one `yarilo-<component>` link per
component the binary lists (`yarilo links`, from the dispatch table in
crates/yarilo/src/dispatch.rs: a new component appears here with no change
to this file), the glibc/libgcc closure, CA certificates and a non-root
user: no shell, no package manager.

The lab images are stand-ins for public images that cannot be pulled on
machines without a registry. They are assembled from this machine's Debian
packages and their library closure, and carry busybox so that tests and
lab scenarios can script them.
"""

import os
import subprocess
from dataclasses import dataclass
from typing import Callable, Optional

from oci import Image, Tree

CARGO_PACKAGES = ["yarilo", "yarctl"]
BINARIES = ["yarilo", "yarctl"]

YARILO_UID = 10000
REDIS_UID = 999
MYSQL_UID = 999

# Applets linked for scripting the lab images (busybox's own shell is sh).
BUSYBOX_APPLETS = [
    "sh", "cat", "chmod", "cp", "echo", "env", "grep", "head", "hostname",
    "id", "kill", "ls", "mkdir", "mv", "nc", "printf", "ps", "rm", "sed",
    "sleep", "tail", "test", "touch", "tr", "wc",
]

# yarilo single's listeners in the image (images/yarilo/yarilo.yaml).
YARILO_PORTS = [1143, 1993, 1110, 1995, 2424, 1587, 1465, 9090]


@dataclass
class Facts:
    root: str
    bin_dir: Optional[str]
    epoch: int
    created: str
    revision: str
    version: str
    licence: str
    source: str


@dataclass
class Definition:
    build: Callable[[Facts, str], Image]
    needs_cargo: bool


def dpkg_packages(paths):
    """Debian packages (name=version) owning the host files copied in."""
    queries = set()
    for p in paths:
        queries.add(p)
        for prefix in ("/usr/lib/", "/usr/bin/", "/usr/sbin/", "/usr/lib64/"):
            if p.startswith(prefix):
                queries.add(p[4:])
    r = subprocess.run(["dpkg-query", "-S", *sorted(queries)], capture_output=True, text=True)
    pkgs = set()
    for line in r.stdout.splitlines():
        owners, _, _ = line.partition(": ")
        for o in owners.split(","):
            o = o.strip()
            if o and not o.startswith("diversion"):
                pkgs.add(o)
    if not pkgs:
        return []
    r = subprocess.run(
        ["dpkg-query", "-W", "-f=${binary:Package}=${Version}\n", *sorted(pkgs)],
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(set(r.stdout.split()))


def add_copyrights(tree: Tree, packages):
    """Debian's copyright file of every package whose files are included."""
    for p in packages:
        name = p.split("=", 1)[0].split(":", 1)[0]
        path = f"/usr/share/doc/{name}/copyright"
        if os.path.exists(path):
            tree.add_host(path)


def base_etc(tree: Tree, users):
    """passwd/group with root and the image's service user; hosts via DNS."""
    passwd = "root:x:0:0:root:/root:/sbin/nologin\n"
    group = "root:x:0:\n"
    for name, uid, home in users:
        passwd += f"{name}:x:{uid}:{uid}:{name}:{home}:/sbin/nologin\n"
        group += f"{name}:x:{uid}:\n"
    tree.add_file("/etc/passwd", passwd.encode())
    tree.add_file("/etc/group", group.encode())
    tree.add_file("/etc/nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files dns\n")
    tree.add_dir("/tmp", 0o1777)


def add_busybox(tree: Tree):
    tree.add_host("/bin/busybox")
    for applet in BUSYBOX_APPLETS:
        tree.add_symlink(f"/usr/bin/{applet}", "busybox")


def labels(facts: Facts, title, description, licences, packages):
    out = {
        "org.opencontainers.image.title": title,
        "org.opencontainers.image.description": description,
        "org.opencontainers.image.version": facts.version,
        "org.opencontainers.image.revision": facts.revision,
        "org.opencontainers.image.source": facts.source,
        "org.opencontainers.image.licenses": licences,
        "org.opencontainers.image.created": facts.created,
    }
    if packages:
        out["io.yarilo.image.debian-packages"] = " ".join(packages)
    return out


def exposed(ports):
    return {f"{p}/tcp": {} for p in ports}


def yarilo_image(facts: Facts, tag: str) -> Image:
    bins = facts.bin_dir
    links = subprocess.run(
        [os.path.join(bins, "yarilo"), "links"], check=True, capture_output=True, text=True
    ).stdout.split()
    if "single" not in links:
        raise RuntimeError("`yarilo links` did not list `single`: wrong binary?")

    base = Tree()
    base_etc(base, [("yarilo", YARILO_UID, "/var/lib/yarilo")])
    base.add_host("/etc/ssl/certs/ca-certificates.crt")
    for b in BINARIES:
        base.add_elf_closure(os.path.join(bins, b))
    packages = dpkg_packages(base.host_files)
    add_copyrights(base, packages)

    app = Tree()
    for b in BINARIES:
        with open(os.path.join(bins, b), "rb") as f:
            app.add_file(f"/usr/bin/{b}", f.read(), 0o755)
    for c in links:
        app.add_symlink(f"/usr/bin/yarilo-{c}", "yarilo")
    with open(os.path.join(facts.root, "images", "yarilo", "yarilo.yaml"), "rb") as f:
        app.add_file("/etc/yarilo/yarilo.yaml", f.read())
    for lic in ("LICENSE-APACHE", "LICENSE-MIT"):
        with open(os.path.join(facts.root, lic), "rb") as f:
            app.add_file(f"/usr/share/doc/yarilo/{lic}", f.read())
    # The data volume: the only writable path. A fresh named volume takes
    # this owner and mode from the image.
    app.add_dir("/var/lib/yarilo", 0o700, YARILO_UID, YARILO_UID)

    lab = labels(facts, "yarilo", "yarilo mail server: every component, yarctl", facts.licence, packages)
    config = {
        "User": f"{YARILO_UID}:{YARILO_UID}",
        "Env": [
            "PATH=/usr/bin",
            "YARILO_CONFIG=/etc/yarilo/yarilo.yaml",
            "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
        ],
        "Cmd": ["yarilo", "single"],
        "WorkingDir": "/var/lib/yarilo",
        "Volumes": {"/var/lib/yarilo": {}},
        "ExposedPorts": exposed(YARILO_PORTS),
        "StopSignal": "SIGTERM",
        "Labels": lab,
    }
    return Image(
        name="yarilo",
        tag=tag,
        layers=[("glibc closure, CA certificates, users", base.layer(facts.epoch)), ("yarilo", app.layer(facts.epoch))],
        config=config,
        created=facts.created,
        annotations=lab,
    )


def redis_image(facts: Facts, tag: str) -> Image:
    t = Tree()
    base_etc(t, [("redis", REDIS_UID, "/data")])
    for b in ("/usr/bin/redis-check-rdb", "/usr/bin/redis-server", "/usr/bin/redis-cli"):
        t.add_host(b)
    # Debian's redis-sentinel package is this one link (redis picks its
    # mode from argv[0]).
    t.add_symlink("/usr/bin/redis-sentinel", "redis-check-rdb")
    add_busybox(t)
    for b in ("/usr/bin/redis-check-rdb", "/usr/bin/redis-cli"):
        t.add_elf_closure(b)
    t.add_dir("/data", 0o755, REDIS_UID, REDIS_UID)
    packages = dpkg_packages(t.host_files)
    add_copyrights(t, packages)
    lab = labels(
        facts,
        "yarilo-lab-redis",
        "Redis and Redis Sentinel from Debian's packages, for yarilo's tests and lab",
        "BSD-3-Clause AND GPL-2.0-only AND LGPL-2.1-or-later",
        packages,
    )
    config = {
        "User": f"{REDIS_UID}:{REDIS_UID}",
        "Env": ["PATH=/usr/bin"],
        "Cmd": ["redis-server", "--protected-mode", "no"],
        "WorkingDir": "/data",
        "Volumes": {"/data": {}},
        "ExposedPorts": exposed([6379, 26379]),
        "Labels": lab,
    }
    return Image("yarilo-lab-redis", tag, [("redis", t.layer(facts.epoch))], config, facts.created, lab)


def mariadb_image(facts: Facts, tag: str) -> Image:
    t = Tree()
    base_etc(t, [("mysql", MYSQL_UID, "/var/lib/mysql")])
    for b in ("/usr/sbin/mariadbd", "/usr/bin/mariadb", "/usr/bin/mariadb-admin"):
        t.add_host(b)
        t.add_elf_closure(b)
    t.add_host_tree("/usr/share/mysql")
    add_busybox(t)
    with open(os.path.join(facts.root, "images", "lab", "mariadb-entrypoint.sh"), "rb") as f:
        t.add_file("/usr/local/bin/docker-entrypoint.sh", f.read(), 0o755)
    t.add_dir("/var/lib/mysql", 0o755, MYSQL_UID, MYSQL_UID)
    t.add_dir("/run/mysqld", 0o755, MYSQL_UID, MYSQL_UID)
    t.add_dir("/docker-entrypoint-initdb.d")
    packages = dpkg_packages(t.host_files)
    add_copyrights(t, packages)
    lab = labels(
        facts,
        "yarilo-lab-mariadb",
        "MariaDB from Debian's packages with the public image's MARIADB_* environment, for yarilo's tests",
        "GPL-2.0-only AND LGPL-2.1-or-later",
        packages,
    )
    config = {
        "User": f"{MYSQL_UID}:{MYSQL_UID}",
        "Env": ["PATH=/usr/local/bin:/usr/bin:/usr/sbin"],
        "Entrypoint": ["docker-entrypoint.sh"],
        "Cmd": ["mariadbd"],
        "Volumes": {"/var/lib/mysql": {}},
        "ExposedPorts": exposed([3306]),
        "Labels": lab,
    }
    return Image("yarilo-lab-mariadb", tag, [("mariadb", t.layer(facts.epoch))], config, facts.created, lab)


IMAGES = {
    "yarilo": Definition(yarilo_image, needs_cargo=True),
    "yarilo-lab-redis": Definition(redis_image, needs_cargo=False),
    "yarilo-lab-mariadb": Definition(mariadb_image, needs_cargo=False),
}
