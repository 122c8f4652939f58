#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The images `images/build` writes: reproducible, valid OCI layouts that
//! the Docker engine loads, holding what docs/images.md lists and nothing
//! else, and a yarilo container that a user added with yarctl can read mail
//! from after an MTA delivered it.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use yarilo_packaging_tests::*;

const ALL: [&str; 3] = ["yarilo", "yarilo-lab-redis", "yarilo-lab-mariadb"];

#[test]
fn two_builds_into_two_directories_give_identical_bytes() {
    let tag = unique("repro");
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let first = build_images(a.path(), &tag, &[]);
    let second = build_images(b.path(), &tag, &[]);
    assert_eq!(first.digests(), second.digests());
    let digests = first.digests();
    let names: Vec<&str> = digests
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(names, ["yarilo", "yarilo-lab-mariadb", "yarilo-lab-redis"]);
    for line in first.digests().lines() {
        let (_, digest) = line.split_once(' ').unwrap();
        assert!(
            digest.starts_with("sha256:") && digest.len() == 71,
            "{line}"
        );
    }
    for image in ALL {
        let x = std::fs::read(first.archive(image)).unwrap();
        let y = std::fs::read(second.archive(image)).unwrap();
        assert!(x == y, "{image}.tar differs between the two builds");
    }
    // The tag names the image but is not part of its digest.
    let other = tempfile::tempdir().unwrap();
    let retagged = build_images(other.path(), &unique("other"), &["yarilo-lab-redis"]);
    let redis = |d: String| {
        d.lines()
            .find(|l| l.starts_with("yarilo-lab-redis "))
            .unwrap()
            .to_string()
    };
    assert_eq!(redis(retagged.digests()), redis(first.digests()));
}

fn links_of_built_binary() -> Vec<String> {
    run(Command::new(target_dir().join("image-build/release/yarilo")).arg("links"))
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn yarilo_image_holds_the_binaries_links_certificates_and_no_shell() {
    let dir = tempfile::tempdir().unwrap();
    let built = build_images(dir.path(), &unique("contents"), &["yarilo"]);
    let listing = image_listing(&built.archive("yarilo"));
    let paths: BTreeSet<&str> = listing
        .iter()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    for want in [
        "/usr/bin/yarilo",
        "/usr/bin/yarctl",
        "/etc/yarilo/yarilo.yaml",
        "/etc/ssl/certs/ca-certificates.crt",
        "/etc/passwd",
        "/usr/share/doc/yarilo/LICENSE-MIT",
        "/usr/share/doc/libc6/copyright",
    ] {
        assert!(paths.contains(want), "{want} missing from the image");
    }
    let links = links_of_built_binary();
    assert!(links.iter().any(|l| l == "imap-login"), "{links:?}");
    for c in &links {
        let line = format!("/usr/bin/yarilo-{c} symlink 0:0 777 -> yarilo");
        assert!(listing.contains(&line), "no link for {c}: {line}");
    }
    for banned in [
        "/bin/sh",
        "/usr/bin/sh",
        "/bin/bash",
        "/usr/bin/bash",
        "/usr/bin/busybox",
        "/usr/bin/apt",
        "/usr/bin/dpkg",
    ] {
        assert!(
            !paths.contains(banned),
            "{banned} must not be in the yarilo image"
        );
    }
    // Owned by root, except the data volume owned by the service user.
    for line in &listing {
        let mut f = line.split(' ');
        let (path, owner) = (f.next().unwrap(), f.nth(1).unwrap());
        if path == "/var/lib/yarilo" {
            assert_eq!(line, "/var/lib/yarilo dir 10000:10000 700");
        } else {
            assert_eq!(owner, "0:0", "{line}");
        }
    }
    let meta = built.metadata();
    let size = meta["images"]["yarilo"]["uncompressed_bytes"]
        .as_u64()
        .unwrap();
    assert!(size < 40_000_000, "the yarilo image is {size} bytes");

    // The config: non-root numeric user, the data volume, labels.
    let config = image_config(&built, "yarilo");
    assert_eq!(config["config"]["User"], "10000:10000");
    assert_eq!(
        config["config"]["Cmd"],
        serde_json::json!(["yarilo", "single"])
    );
    assert!(config["config"]["Volumes"]["/var/lib/yarilo"].is_object());
    let labels = &config["config"]["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.licenses"],
        "Apache-2.0 OR MIT"
    );
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    let revision = run(Command::new("git")
        .arg("-C")
        .arg(repo_root())
        .args(["rev-parse", "HEAD"]))
    .trim()
    .to_string();
    assert!(
        labels["org.opencontainers.image.revision"]
            .as_str()
            .unwrap()
            .starts_with(&revision),
        "{labels}"
    );
    assert!(labels["io.yarilo.image.debian-packages"]
        .as_str()
        .unwrap()
        .contains("libc6"));
}

/// The image config blob, read from the OCI side of the archive.
fn image_config(built: &BuiltImages, image: &str) -> serde_json::Value {
    let script = format!(
        r#"
import json, tarfile
t = tarfile.open("{}")
index = json.load(t.extractfile("index.json"))
m = index["manifests"][0]
manifest = json.load(t.extractfile("blobs/sha256/" + m["digest"][7:]))
print(t.extractfile("blobs/sha256/" + manifest["config"]["digest"][7:]).read().decode())
"#,
        built.archive(image).display()
    );
    serde_json::from_str(&python(&script).unwrap()).unwrap()
}

#[test]
fn archives_are_valid_oci_layouts_for_skopeo_and_umoci() {
    let dir = tempfile::tempdir().unwrap();
    let built = build_images(dir.path(), &unique("oci"), &[]);
    for image in ALL {
        let archive = built.archive(image);
        // skopeo reads the OCI archive and verifies every blob it copies;
        // --preserve-digests makes it fail rather than rewrite anything.
        let copy = dir.path().join(format!("{image}.copy"));
        std::fs::create_dir_all(&copy).unwrap();
        run(Command::new("skopeo").args([
            "copy",
            "--quiet",
            "--preserve-digests",
            &format!("oci-archive:{}:{}", archive.display(), built.tag),
            &format!("oci:{}:{}", copy.display(), built.tag),
        ]));
        let inspect = run(Command::new("skopeo")
            .args(["inspect", &format!("oci:{}:{}", copy.display(), built.tag)]));
        let inspect: serde_json::Value = serde_json::from_str(&inspect).unwrap();
        let digest = built
            .digests()
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{image} ")).map(str::to_string))
            .unwrap();
        assert_eq!(
            inspect["Digest"], digest,
            "{image}: skopeo sees another digest"
        );
        // umoci unpacks the layout into a runtime bundle (rootless).
        let layout = dir.path().join(format!("{image}.layout"));
        std::fs::create_dir_all(&layout).unwrap();
        run(Command::new("tar")
            .arg("-xf")
            .arg(&archive)
            .arg("-C")
            .arg(&layout));
        let bundle = dir.path().join(format!("{image}.bundle"));
        run(Command::new("umoci").args([
            "unpack",
            "--rootless",
            "--image",
            &format!("{}:{}", layout.display(), built.tag),
            bundle.to_str().unwrap(),
        ]));
        let rootfs = bundle.join("rootfs");
        let expect = match image {
            "yarilo" => "usr/bin/yarilo",
            "yarilo-lab-redis" => "usr/bin/redis-check-rdb",
            _ => "usr/sbin/mariadbd",
        };
        assert!(
            rootfs.join(expect).is_file(),
            "{image}: {expect} not unpacked"
        );
    }
}

#[test]
fn yarilo_container_serves_a_user_added_with_yarctl_on_a_read_only_root() {
    let dir = tempfile::tempdir().unwrap();
    let built = build_images(dir.path(), &unique("run"), &["yarilo"]);
    let mut d = Docker::new();
    let image = d.load(&built, "yarilo");
    let volume = d.volume(&unique("yarilo-data-"));
    let name = unique("yarilo-single-");
    d.run_detached(
        &name,
        &[
            "--read-only",
            "-v",
            &format!("{volume}:/var/lib/yarilo"),
            "-p",
            "127.0.0.1::1993",
            "-p",
            "127.0.0.1::1143",
            "-p",
            "127.0.0.1::2424",
            &image,
        ],
    );
    run(Command::new("docker").args([
        "exec",
        &name,
        "yarctl",
        "user",
        "add",
        "alice",
        "--password",
        "a-long-secret",
        "--config",
        "/etc/yarilo/yarilo.yaml",
    ]));
    let lmtp = d.published(&name, "2424/tcp");
    let imaps = d.published(&name, "1993/tcp");
    let imap = d.published(&name, "1143/tcp");
    eventually(
        "LMTP delivery into the container",
        Duration::from_secs(30),
        || lmtp_deliver(&lmtp, "alice", "first through lmtp"),
    );
    let subjects = eventually("IMAPS login from the host", Duration::from_secs(30), || {
        imaps_subjects(&imaps, "alice", "a-long-secret")
    });
    assert!(
        subjects.contains("Subject: first through lmtp"),
        "{subjects}\n{}",
        logs(&name)
    );

    // The mail and the user live on the volume: a restarted container
    // (same volume, read-only root) still has them.
    run(Command::new("docker").args(["restart", "-t", "20", &name]));
    let imap = {
        let _ = imap;
        d.published(&name, "1143/tcp")
    };
    let subjects = eventually(
        "IMAP STARTTLS after a restart",
        Duration::from_secs(30),
        || imap_starttls_subjects(&imap, "alice", "a-long-secret"),
    );
    assert!(
        subjects.contains("Subject: first through lmtp"),
        "{subjects}\n{}",
        logs(&name)
    );
    // Nothing but the data volume was written.
    let changes = docker(&["diff", &name]);
    assert!(
        changes.trim().is_empty(),
        "the container wrote outside its volume:\n{changes}"
    );
}

#[test]
fn lab_redis_serves_and_its_sentinel_watches_it() {
    let dir = tempfile::tempdir().unwrap();
    let built = build_images(dir.path(), &unique("redis"), &["yarilo-lab-redis"]);
    let mut d = Docker::new();
    let image = d.load(&built, "yarilo-lab-redis");
    let net = d.network(&unique("yarilo-net-"));
    let master = unique("redis-master-");
    d.run_detached(&master, &["--network", &net, &image]);
    let sentinel = unique("redis-sentinel-");
    let script = format!(
        "printf 'port 26379\\nsentinel resolve-hostnames yes\\nsentinel monitor mymaster {master} 6379 1\\n' > /data/sentinel.conf && exec redis-sentinel /data/sentinel.conf"
    );
    d.run_detached(&sentinel, &["--network", &net, &image, "sh", "-c", &script]);
    eventually("redis answers PING", Duration::from_secs(20), || {
        let out = output(Command::new("docker").args([
            "exec",
            &sentinel,
            "redis-cli",
            "-h",
            &master,
            "ping",
        ]));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.trim() == "PONG" {
            Ok(())
        } else {
            Err(format!("{text}{}", logs(&master)))
        }
    });
    let master_ip = docker(&[
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        &master,
    ]);
    eventually("sentinel knows the master", Duration::from_secs(20), || {
        let out = output(Command::new("docker").args([
            "exec",
            &sentinel,
            "redis-cli",
            "-p",
            "26379",
            "sentinel",
            "get-master-addr-by-name",
            "mymaster",
        ]));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.lines().next() == Some(master_ip.trim()) && text.contains("6379") {
            Ok(())
        } else {
            Err(format!("{text}{}", logs(&sentinel)))
        }
    });
}
