"""Deterministic root filesystems and OCI/Docker image archives.

Everything here is a pure function of its inputs: tar entries are sorted,
every entry carries the same mtime, owners are numeric with empty names,
layers are uncompressed (their digest is their diff_id, so no compressor
version can change a digest), and JSON is written with sorted keys and no
whitespace.

One archive carries two views over the same blobs:
- OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/...`), read by
  containerd (`ctr images import`, `kind load image-archive`), skopeo, umoci;
- the docker-archive `manifest.json` naming the same config and layer blobs,
  read by `docker load` (engine 20.10 and later).
"""

import hashlib
import io
import json
import os
import stat
import subprocess
import tarfile
from dataclasses import dataclass, field

MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"


def canonical_json(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Entry:
    kind: str  # "dir", "file", "symlink"
    mode: int = 0o755
    uid: int = 0
    gid: int = 0
    data: bytes = b""
    target: str = ""


@dataclass
class Tree:
    """A root filesystem under construction: absolute path -> Entry."""

    entries: dict = field(default_factory=dict)
    # Host files copied in (after symlink resolution), for provenance.
    host_files: set = field(default_factory=set)

    def _parents(self, path: str):
        parent = os.path.dirname(path)
        while parent not in ("/", ""):
            if parent not in self.entries:
                self.entries[parent] = Entry("dir", 0o755)
            elif self.entries[parent].kind != "dir":
                # A parent that is a symlink in the tree: nothing to add.
                pass
            parent = os.path.dirname(parent)

    def add_dir(self, path, mode=0o755, uid=0, gid=0):
        self._parents(path)
        self.entries[path] = Entry("dir", mode, uid, gid)

    def add_file(self, path, data: bytes, mode=0o644, uid=0, gid=0):
        self._parents(path)
        self.entries[path] = Entry("file", mode, uid, gid, data=data)

    def add_symlink(self, path, target):
        self._parents(path)
        self.entries[path] = Entry("symlink", 0o777, target=target)

    def add_host(self, path, dest=None):
        """Copy a host file into the tree at the same path (or `dest`),
        reproducing every symlink met on the way (merged /usr, soname
        links), so the result resolves inside the image exactly as on the
        host."""
        if dest is not None:
            real = os.path.realpath(path)
            st = os.stat(real)
            with open(real, "rb") as f:
                self.add_file(dest, f.read(), normal_mode(st.st_mode))
            self.host_files.add(path)
            return
        parts = path.strip("/").split("/")
        cur = ""
        for i, part in enumerate(parts):
            cur = cur + "/" + part
            rest = "/".join(parts[i + 1 :])
            if os.path.islink(cur):
                target = os.readlink(cur)
                self.add_symlink(cur, target)
                base = target if target.startswith("/") else os.path.join(os.path.dirname(cur), target)
                resolved = os.path.normpath(base)
                return self.add_host(resolved + ("/" + rest if rest else ""))
            if rest:
                if cur not in self.entries:
                    self.add_dir(cur)
                continue
            st = os.stat(cur)
            if stat.S_ISDIR(st.st_mode):
                self.add_dir(cur, normal_mode(st.st_mode))
            else:
                with open(cur, "rb") as f:
                    self.add_file(cur, f.read(), normal_mode(st.st_mode))
                self.host_files.add(cur)
        return None

    def add_host_tree(self, root):
        """A host directory with everything below it."""
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            self.add_host(dirpath)
            for name in sorted(filenames):
                self.add_host(os.path.join(dirpath, name))

    def add_elf_closure(self, binary):
        """The shared libraries `binary` loads, and the dynamic loader."""
        for lib in elf_closure(binary):
            self.add_host(lib)

    def layer(self, mtime: int) -> bytes:
        return layer_tar(self.entries, mtime)


def normal_mode(st_mode: int) -> int:
    """Permission bits as packages ship them, without setuid/setgid."""
    m = stat.S_IMODE(st_mode) & 0o1777
    return m


def elf_closure(binary):
    """Libraries from `ldd` (the loader resolves the full transitive set)."""
    out = subprocess.run(["ldd", binary], check=True, capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        line = line.strip()
        if "=>" in line:
            right = line.split("=>", 1)[1].strip()
            if right.startswith("/"):
                libs.append(right.split(" (", 1)[0])
            elif right.startswith("not found"):
                raise RuntimeError(f"{binary}: library {line.split()[0]} not found")
        elif line.startswith("/"):
            libs.append(line.split(" (", 1)[0])
    return sorted(set(libs))


def layer_tar(entries: dict, mtime: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for path in sorted(entries):
            e = entries[path]
            ti = tarfile.TarInfo(path.lstrip("/"))
            ti.mtime = mtime
            ti.uid, ti.gid = e.uid, e.gid
            ti.uname = ti.gname = ""
            ti.mode = e.mode
            if e.kind == "dir":
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
            elif e.kind == "symlink":
                ti.type = tarfile.SYMTYPE
                ti.linkname = e.target
                tf.addfile(ti)
            else:
                ti.size = len(e.data)
                tf.addfile(ti, io.BytesIO(e.data))
    return buf.getvalue()


@dataclass
class Image:
    name: str  # repository, e.g. "yarilo"
    tag: str
    layers: list  # list of (description, layer tar bytes)
    config: dict  # the OCI image config's "config" member
    created: str
    annotations: dict


@dataclass
class Built:
    manifest_digest: str
    config_digest: str
    archive_bytes: int
    layer_bytes: int


def write_archive(img: Image, path: str, mtime: int) -> Built:
    """Writes one image as an OCI layout + docker-archive tar at `path`."""
    blobs = {}

    def blob(data: bytes) -> dict:
        d = sha256(data)
        blobs[d] = data
        return {"digest": d, "size": len(data)}

    layer_descs = []
    diff_ids = []
    history = []
    for desc, data in img.layers:
        b = blob(data)
        layer_descs.append({"mediaType": MEDIA_LAYER, **b})
        diff_ids.append(b["digest"])
        history.append({"created": img.created, "created_by": f"images/build: {desc}"})
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": img.created,
        "config": img.config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    }
    config_desc = {"mediaType": MEDIA_CONFIG, **blob(canonical_json(config))}
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": config_desc,
        "layers": layer_descs,
        "annotations": img.annotations,
    }
    manifest_desc = blob(canonical_json(manifest))
    ref = f"{img.name}:{img.tag}"
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                **manifest_desc,
                "annotations": {
                    "io.containerd.image.name": f"docker.io/library/{ref}",
                    "org.opencontainers.image.ref.name": img.tag,
                },
            }
        ],
    }
    docker_manifest = [
        {
            "Config": "blobs/sha256/" + config_desc["digest"][7:],
            "RepoTags": [ref],
            "Layers": ["blobs/sha256/" + d["digest"][7:] for d in layer_descs],
        }
    ]
    files = {
        "oci-layout": canonical_json({"imageLayoutVersion": "1.0.0"}),
        "index.json": canonical_json(index),
        "manifest.json": canonical_json(docker_manifest),
    }
    for d, data in blobs.items():
        files["blobs/sha256/" + d[7:]] = data
    entries = {"/blobs": Entry("dir", 0o755), "/blobs/sha256": Entry("dir", 0o755)}
    for name, data in files.items():
        entries["/" + name] = Entry("file", 0o644, data=data)
    archive = layer_tar(entries, mtime)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(archive)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return Built(
        manifest_digest=manifest_desc["digest"],
        config_digest=config_desc["digest"],
        archive_bytes=len(archive),
        layer_bytes=sum(len(d) for _, d in img.layers),
    )
