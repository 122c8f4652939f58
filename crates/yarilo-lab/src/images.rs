//! Images for a run. With `--images DIR` (the output of `images/build`)
//! every archive there is loaded under a per-run name (its manifest's
//! RepoTags rewritten on the way in, so no tag another checkout uses is
//! touched). Without it the lab assembles throwaway images FROM nothing:
//! the given yarilo binary and its shared-library closure (`yarilo`), the
//! Debian `redis-server`/`redis-cli` with a static busybox for the chart's
//! shell snippets (`redis`). The lab's own helper image (the pause process)
//! is always assembled here from the running `yarilo-lab` binary.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use bollard::query_parameters::ImportImageOptionsBuilder;
use bollard::Docker;
use futures::StreamExt;
use sha2::{Digest, Sha256};

use crate::{LabError, Result};

/// A file in an image.
#[derive(Debug, Clone)]
pub enum Entry {
    /// Copied from the host (symlinks followed).
    Host {
        src: PathBuf,
        dst: String,
        mode: u32,
    },
    Data {
        dst: String,
        data: Vec<u8>,
        mode: u32,
    },
    Symlink {
        dst: String,
        target: String,
    },
    Dir {
        dst: String,
        mode: u32,
    },
}

#[derive(Debug, Clone)]
pub struct ImageSpec {
    pub entries: Vec<Entry>,
    pub entrypoint: Vec<String>,
    pub env: Vec<String>,
}

/// What a run loaded: manifest image name (repository's last element) →
/// local reference, the helper image, and every reference to remove.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    pub by_name: BTreeMap<String, String>,
    pub helper: String,
    pub refs: Vec<String>,
    /// name → content digest of the archive's config (image id).
    pub digests: BTreeMap<String, String>,
}

/// The shared libraries a dynamically linked binary needs (`ldd`).
pub fn closure(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(LabError::io("ldd"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("statically linked") || text.contains("not a dynamic executable") {
        return Ok(Vec::new());
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let path = if let Some((_, rhs)) = line.split_once("=>") {
            rhs.split_whitespace().next()
        } else {
            line.split_whitespace().next()
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    Ok(libs)
}

fn base_entries() -> Vec<Entry> {
    let mut e = vec![
        Entry::Dir { dst: "tmp".into(), mode: 0o1777 },
        Entry::Dir { dst: "etc".into(), mode: 0o755 },
        Entry::Dir { dst: "run".into(), mode: 0o755 },
        Entry::Dir { dst: "var/lib".into(), mode: 0o755 },
        Entry::Data {
            dst: "etc/nsswitch.conf".into(),
            data: b"hosts: files dns\npasswd: files\ngroup: files\n".to_vec(),
            mode: 0o644,
        },
        Entry::Data {
            dst: "etc/passwd".into(),
            data: b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".to_vec(),
            mode: 0o644,
        },
        Entry::Data {
            dst: "etc/group".into(),
            data: b"root:x:0:\nnogroup:x:65534:\n".to_vec(),
            mode: 0o644,
        },
    ];
    e.push(Entry::Dir {
        dst: "root".into(),
        mode: 0o700,
    });
    e
}

fn with_closure(entries: &mut Vec<Entry>, binary: &Path) -> Result<()> {
    for lib in closure(binary)? {
        let dst = lib.to_string_lossy().trim_start_matches('/').to_string();
        if !entries
            .iter()
            .any(|e| matches!(e, Entry::Host { dst: d, .. } if d == &dst))
        {
            entries.push(Entry::Host {
                src: lib,
                dst,
                mode: 0o755,
            });
        }
    }
    Ok(())
}

/// The yarilo image: the binary at /usr/local/bin/yarilo with a
/// `yarilo-<component>` link per component.
pub fn yarilo_spec(binary: &Path) -> Result<ImageSpec> {
    let mut entries = base_entries();
    entries.push(Entry::Host {
        src: binary.to_path_buf(),
        dst: "usr/local/bin/yarilo".into(),
        mode: 0o755,
    });
    for c in [
        "single",
        "config",
        "auth",
        "locks",
        "warden",
        "director",
        "backend-reg",
        "imap",
        "imap-login",
        "pop3",
        "pop3-login",
        "submission",
        "submission-login",
        "lmtp",
        "lmtp-login",
        "quota-status",
    ] {
        entries.push(Entry::Symlink {
            dst: format!("usr/local/bin/yarilo-{c}"),
            target: "yarilo".into(),
        });
    }
    entries.push(Entry::Dir {
        dst: "var/lib/yarilo".into(),
        mode: 0o755,
    });
    entries.push(Entry::Dir {
        dst: "run/yarilo".into(),
        mode: 0o755,
    });
    with_closure(&mut entries, binary)?;
    Ok(ImageSpec {
        entries,
        entrypoint: vec!["/usr/local/bin/yarilo".into()],
        env: vec!["PATH=/usr/local/bin:/usr/bin:/bin".into()],
    })
}

/// Redis (and Sentinel: the same binary as `redis-sentinel`) from the
/// host's Debian packages, with busybox for shell snippets.
pub fn redis_spec() -> Result<ImageSpec> {
    let mut entries = base_entries();
    for (src, dst) in [
        ("/usr/bin/redis-server", "usr/bin/redis-server"),
        ("/usr/bin/redis-cli", "usr/bin/redis-cli"),
    ] {
        let p = Path::new(src);
        if !p.exists() {
            return Err(LabError::Substrate(format!(
                "{src} is missing: the lab's Redis image is made from Debian's redis-server \
                 (run scripts/setup-dev)"
            )));
        }
        entries.push(Entry::Host {
            src: p.to_path_buf(),
            dst: dst.into(),
            mode: 0o755,
        });
        with_closure(&mut entries, p)?;
    }
    entries.push(Entry::Symlink {
        dst: "usr/bin/redis-sentinel".into(),
        target: "redis-server".into(),
    });
    let busybox = Path::new("/bin/busybox");
    if !busybox.exists() {
        return Err(LabError::Substrate(
            "/bin/busybox is missing: install busybox-static (scripts/setup-dev)".into(),
        ));
    }
    entries.push(Entry::Host {
        src: busybox.to_path_buf(),
        dst: "bin/busybox".into(),
        mode: 0o755,
    });
    for tool in [
        "sh", "cp", "cat", "sleep", "mkdir", "echo", "sed", "grep", "ls", "test", "hostname",
        "kill",
    ] {
        entries.push(Entry::Symlink {
            dst: format!("bin/{tool}"),
            target: "busybox".into(),
        });
    }
    entries.push(Entry::Dir {
        dst: "data".into(),
        mode: 0o777,
    });
    Ok(ImageSpec {
        entries,
        entrypoint: vec!["/usr/bin/redis-server".into()],
        env: vec!["PATH=/usr/local/bin:/usr/bin:/bin".into()],
    })
}

/// The helper image: this very binary (pause).
pub fn helper_spec() -> Result<ImageSpec> {
    let me = std::env::current_exe().map_err(LabError::io("current_exe"))?;
    let mut entries = base_entries();
    entries.push(Entry::Host {
        src: me.clone(),
        dst: "usr/local/bin/yarilo-lab".into(),
        mode: 0o755,
    });
    with_closure(&mut entries, &me)?;
    Ok(ImageSpec {
        entries,
        entrypoint: vec!["/usr/local/bin/yarilo-lab".into(), "pause".into()],
        env: vec!["PATH=/usr/local/bin:/usr/bin:/bin".into()],
    })
}

fn header(kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    // Fixed time: the same inputs give the same layer.
    h.set_mtime(0);
    h
}

/// The layer tar of a spec (parents created, entries sorted).
pub fn layer(spec: &ImageSpec) -> Result<Vec<u8>> {
    let mut dirs: BTreeMap<String, u32> = BTreeMap::new();
    let mut items: BTreeMap<String, &Entry> = BTreeMap::new();
    for e in &spec.entries {
        let dst = match e {
            Entry::Host { dst, .. } | Entry::Data { dst, .. } | Entry::Symlink { dst, .. } => dst,
            Entry::Dir { dst, mode } => {
                dirs.insert(dst.clone(), *mode);
                continue;
            }
        };
        items.insert(dst.clone(), e);
    }
    for path in items.keys().chain(dirs.clone().keys()) {
        let mut p = Path::new(path).parent();
        while let Some(d) = p {
            let s = d.to_string_lossy().to_string();
            if s.is_empty() {
                break;
            }
            dirs.entry(s).or_insert(0o755);
            p = d.parent();
        }
    }
    let mut b = tar::Builder::new(Vec::new());
    for (d, mode) in &dirs {
        let mut h = header(tar::EntryType::Directory, 0, *mode);
        b.append_data(&mut h, format!("{d}/"), std::io::empty())
            .map_err(LabError::io(d))?;
    }
    for (dst, e) in items {
        match e {
            Entry::Host { src, mode, .. } => {
                let mut data = Vec::new();
                std::fs::File::open(src)
                    .and_then(|mut f| f.read_to_end(&mut data))
                    .map_err(LabError::io(src))?;
                let mut h = header(tar::EntryType::Regular, data.len() as u64, *mode);
                b.append_data(&mut h, &dst, data.as_slice())
                    .map_err(LabError::io(&dst))?;
            }
            Entry::Data { data, mode, .. } => {
                let mut h = header(tar::EntryType::Regular, data.len() as u64, *mode);
                b.append_data(&mut h, &dst, data.as_slice())
                    .map_err(LabError::io(&dst))?;
            }
            Entry::Symlink { target, .. } => {
                let mut h = header(tar::EntryType::Symlink, 0, 0o777);
                b.append_link(&mut h, &dst, target)
                    .map_err(LabError::io(&dst))?;
            }
            Entry::Dir { .. } => {}
        }
    }
    b.into_inner().map_err(LabError::io("layer"))
}

/// A `docker save` archive of one image with one layer.
pub fn archive(spec: &ImageSpec, reference: &str) -> Result<(Vec<u8>, String)> {
    let layer = layer(spec)?;
    let diff = hex::encode(Sha256::digest(&layer));
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": { "Entrypoint": spec.entrypoint, "Env": spec.env, "WorkingDir": "/" },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{diff}")] },
        "history": [{ "created_by": "yarilo-lab" }],
    });
    let config = serde_json::to_vec(&config).map_err(|e| LabError::Other(e.to_string()))?;
    let config_id = hex::encode(Sha256::digest(&config));
    let manifest = serde_json::json!([{
        "Config": format!("{config_id}.json"),
        "RepoTags": [reference],
        "Layers": [format!("{diff}/layer.tar")],
    }]);
    let manifest = serde_json::to_vec(&manifest).map_err(|e| LabError::Other(e.to_string()))?;
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8]| -> Result<()> {
        let mut h = header(tar::EntryType::Regular, data.len() as u64, 0o644);
        b.append_data(&mut h, name, data)
            .map_err(LabError::io(name))
    };
    add(&format!("{config_id}.json"), &config)?;
    add(&format!("{diff}/layer.tar"), &layer)?;
    add("manifest.json", &manifest)?;
    Ok((
        b.into_inner().map_err(LabError::io("archive"))?,
        format!("sha256:{config_id}"),
    ))
}

/// Loads an archive into the engine.
pub async fn load(docker: &Docker, archive: Vec<u8>) -> Result<()> {
    let mut s = docker.import_image(
        ImportImageOptionsBuilder::new().quiet(true).build(),
        bollard::body_full(archive.into()),
        None,
    );
    while let Some(item) = s.next().await {
        item?;
    }
    Ok(())
}

/// Rewrites an archive's RepoTags to `reference` (one image per archive).
pub fn retag_archive(data: &[u8], reference: &str) -> Result<(Vec<u8>, Vec<String>, String)> {
    let mut a = tar::Archive::new(data);
    let mut out = tar::Builder::new(Vec::new());
    let mut old = Vec::new();
    let mut config = String::new();
    for entry in a.entries().map_err(LabError::io("archive"))? {
        let mut entry = entry.map_err(LabError::io("archive"))?;
        let path = entry
            .path()
            .map_err(LabError::io("archive"))?
            .to_string_lossy()
            .to_string();
        let mut buf = Vec::new();
        entry.read_to_end(&mut buf).map_err(LabError::io(&path))?;
        let mut h = entry.header().clone();
        if path == "manifest.json" {
            let mut m: serde_json::Value = serde_json::from_slice(&buf)
                .map_err(|e| LabError::Other(format!("manifest.json: {e}")))?;
            if let Some(first) = m.as_array_mut().and_then(|a| a.first_mut()) {
                if let Some(tags) = first.get("RepoTags").and_then(|t| t.as_array()) {
                    old = tags
                        .iter()
                        .filter_map(|t| t.as_str().map(String::from))
                        .collect();
                }
                config = first
                    .get("Config")
                    .and_then(|c| c.as_str())
                    .unwrap_or("")
                    .to_string();
                first["RepoTags"] = serde_json::json!([reference]);
            }
            buf = serde_json::to_vec(&m).map_err(|e| LabError::Other(e.to_string()))?;
            h.set_size(buf.len() as u64);
            h.set_cksum();
        }
        out.append_data(&mut h, &path, buf.as_slice())
            .map_err(LabError::io(&path))?;
    }
    let digest = config
        .trim_end_matches(".json")
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string();
    Ok((
        out.into_inner().map_err(LabError::io("archive"))?,
        old,
        format!("sha256:{digest}"),
    ))
}

/// Images for a run: from an `images/build` directory, or assembled.
pub async fn prepare(
    docker: &Docker,
    suffix: &str,
    images_dir: Option<&Path>,
    binary: Option<&Path>,
) -> Result<Loaded> {
    let mut loaded = Loaded::default();
    let prefix = format!("ylab-{suffix}");
    let (helper, digest) = archive(&helper_spec()?, &format!("{prefix}/helper:lab"))?;
    load(docker, helper).await?;
    loaded.helper = format!("{prefix}/helper:lab");
    loaded.refs.push(loaded.helper.clone());
    loaded.digests.insert("helper".into(), digest);
    if let Some(dir) = images_dir {
        let rd = std::fs::read_dir(dir).map_err(LabError::io(dir))?;
        let mut files: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "tar"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(LabError::Substrate(format!(
                "{}: no image archives (*.tar); run images/build {0}",
                dir.display()
            )));
        }
        for f in files {
            let data = std::fs::read(&f).map_err(LabError::io(&f))?;
            let stem = f
                .file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default();
            let reference = format!("{prefix}/{stem}:lab");
            let (data, old, digest) = retag_archive(&data, &reference)?;
            load(docker, data).await?;
            let name = old
                .first()
                .map(|t| {
                    let repo = t.rsplit_once(':').map(|(r, _)| r).unwrap_or(t);
                    repo.rsplit('/').next().unwrap_or(repo).to_string()
                })
                .unwrap_or(stem);
            loaded.by_name.insert(name.clone(), reference.clone());
            loaded.digests.insert(name, digest);
            loaded.refs.push(reference);
        }
        // The lab's Redis comes from images/build when it has one.
        if !loaded.by_name.contains_key("redis") {
            let (a, d) = archive(&redis_spec()?, &format!("{prefix}/redis:lab"))?;
            load(docker, a).await?;
            loaded
                .by_name
                .insert("redis".into(), format!("{prefix}/redis:lab"));
            loaded.digests.insert("redis".into(), d);
            loaded.refs.push(format!("{prefix}/redis:lab"));
        }
        return Ok(loaded);
    }
    let binary = binary.ok_or_else(|| {
        LabError::Substrate(
            "no images: pass --images DIR (from images/build) or --binary PATH to a yarilo binary"
                .into(),
        )
    })?;
    for (name, spec) in [("yarilo", yarilo_spec(binary)?), ("redis", redis_spec()?)] {
        let reference = format!("{prefix}/{name}:lab");
        let (a, d) = archive(&spec, &reference)?;
        load(docker, a).await?;
        loaded.by_name.insert(name.into(), reference.clone());
        loaded.digests.insert(name.into(), d);
        loaded.refs.push(reference);
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_is_the_same_for_the_same_inputs() {
        let spec = ImageSpec {
            entries: vec![
                Entry::Data {
                    dst: "etc/x".into(),
                    data: b"1".to_vec(),
                    mode: 0o644,
                },
                Entry::Symlink {
                    dst: "usr/bin/y".into(),
                    target: "x".into(),
                },
            ],
            entrypoint: vec!["/x".into()],
            env: vec![],
        };
        let (a, da) = archive(&spec, "t/x:1").unwrap();
        let (b, db) = archive(&spec, "t/x:1").unwrap();
        assert_eq!(a, b);
        assert_eq!(da, db);
        let (retagged, old, d) = retag_archive(&a, "other/x:2").unwrap();
        assert_eq!(old, vec!["t/x:1".to_string()]);
        assert_eq!(d, da);
        assert!(String::from_utf8_lossy(&retagged).contains("other/x:2"));
    }
}
