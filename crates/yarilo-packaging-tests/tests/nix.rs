#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The flake, the NixOS module and its VM tests, as far as a machine
//! without nixpkgs can check them: every `.nix` file parses
//! (`nix-instantiate --parse`), is formatted (`nixpkgs-fmt --check`) and has
//! no unused bindings (`deadnix --fail`); the flake's inputs evaluate; the
//! module knows every component the binary has and docs/nixos.md documents
//! every option.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use yarilo_packaging_tests::*;

fn nix_files() -> Vec<PathBuf> {
    let root = repo_root();
    let out = run(Command::new("git").arg("-C").arg(&root).args([
        "ls-files",
        "--cached",
        "--others",
        "--exclude-standard",
        "*.nix",
    ]));
    let files: Vec<PathBuf> = out
        .lines()
        .map(|l| root.join(l))
        .filter(|p| p.exists())
        .collect();
    for want in [
        "flake.nix",
        "nixos/module.nix",
        "nixos/tests/single.nix",
        "nixos/tests/director.nix",
    ] {
        assert!(
            files.contains(&root.join(want)),
            "{want} missing: {files:?}"
        );
    }
    files
}

/// nix-bin without a daemon: no build users, nothing fetched.
fn nix(program: &str) -> Command {
    let mut c = Command::new(program);
    c.env(
        "NIX_CONFIG",
        "build-users-group =\nexperimental-features = nix-command flakes",
    );
    c
}

#[test]
fn every_nix_file_parses() {
    for f in nix_files() {
        run(nix("nix-instantiate").arg("--parse").arg(&f));
    }
}

#[test]
fn every_nix_file_is_formatted_and_has_no_dead_code() {
    let files = nix_files();
    let out = output(Command::new("nixpkgs-fmt").arg("--check").args(&files));
    assert!(
        out.status.success(),
        "nixpkgs-fmt --check (fix: nixpkgs-fmt <file>):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = output(Command::new("deadnix").args(["--fail"]).args(&files));
    assert!(
        out.status.success(),
        "deadnix:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_flake_declares_its_inputs_and_outputs() {
    let root = repo_root();
    let expr = format!(
        "let f = import {}/flake.nix; in [ (builtins.attrNames f.inputs) (builtins.isFunction f.outputs) f.description ]",
        root.display()
    );
    let out = run(nix("nix-instantiate").args(["--eval", "--strict", "--json", "-E", &expr]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0], serde_json::json!(["crane", "nixpkgs"]));
    assert_eq!(v[1], true);
    // The version the flake builds is the workspace's.
    let expr = format!(
        "(builtins.fromTOML (builtins.readFile {}/Cargo.toml)).workspace.package.version",
        root.display()
    );
    let out = run(nix("nix-instantiate").args(["--eval", "--json", "-E", &expr]));
    assert_eq!(out.trim(), format!("\"{}\"", env!("CARGO_PKG_VERSION")));
}

/// The component table in nixos/module.nix (`name = { services = …`).
fn module_components() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo_root().join("nixos/module.nix")).unwrap();
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let (name, rest) = l.split_once(" = { services = ")?;
            rest.contains("telemetry").then(|| name.to_string())
        })
        .collect()
}

#[test]
fn the_module_knows_every_component_the_binary_has() {
    let dir = tempfile::tempdir().unwrap();
    build_images(dir.path(), &unique("nixlinks"), &["yarilo"]);
    let links: BTreeSet<String> =
        run(Command::new(target_dir().join("image-build/release/yarilo")).arg("links"))
            .lines()
            .filter(|l| *l != "config")
            .map(str::to_string)
            .collect();
    assert_eq!(
        module_components(),
        links,
        "nixos/module.nix `components` must list every component of `yarilo links` (one line each)"
    );
}

#[test]
fn docs_describe_every_module_option() {
    let module = std::fs::read_to_string(repo_root().join("nixos/module.nix")).unwrap();
    let docs = std::fs::read_to_string(repo_root().join("docs/nixos.md")).unwrap();
    let mut seen = 0;
    let mut depth = 0usize;
    let mut inside = false;
    for line in module.lines() {
        if line.trim_start().starts_with("options.services.yarilo = {") {
            inside = true;
            depth = 0;
        }
        if !inside {
            continue;
        }
        // Top-level options sit at four spaces of indentation.
        if let Some(rest) = line.strip_prefix("    ") {
            if !rest.starts_with(' ') {
                if let Some((name, _)) = rest.split_once(" = mk") {
                    let key = format!("services.yarilo.{name}");
                    assert!(
                        docs.contains(&format!("`{key}`")),
                        "docs/nixos.md does not document {key}"
                    );
                    seen += 1;
                }
            }
        }
        depth += line.matches('{').count();
        depth = depth.saturating_sub(line.matches('}').count());
        if depth == 0 {
            inside = false;
        }
    }
    assert!(seen >= 8, "found only {seen} options in nixos/module.nix");
    for sub in [
        "components.<name>.enable",
        "components.<name>.settings",
        "secrets.<name>.file",
        "secrets.<name>.checkValue",
    ] {
        assert!(
            docs.contains(&format!("`services.yarilo.{sub}`")),
            "docs/nixos.md does not document {sub}"
        );
    }
    for c in module_components() {
        assert!(
            docs.contains(&format!("`{c}`")),
            "docs/nixos.md does not name component {c}"
        );
    }
}
