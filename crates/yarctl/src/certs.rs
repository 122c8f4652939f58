//! `yarctl certs`: a development CA and the internal certificates the
//! components use for mTLS.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use yarilo_tls::ca::{write_file, write_pair, Authority};
use yarilo_tls::Role;

#[derive(clap::Subcommand)]
pub enum CertsCmd {
    /// Create a CA and one internal certificate (tls.crt/tls.key) carrying
    /// the pinned server name and role SANs.
    Init {
        /// Where to write ca.crt, ca.key, tls.crt, tls.key.
        #[arg(long, default_value = "./yarilo-data/internal-tls")]
        dir: PathBuf,
        /// The name every internal client verifies (internal_tls.server_name).
        #[arg(long, default_value = "yarilo-internal")]
        server_name: String,
        /// More DNS names or IP addresses for the certificate.
        #[arg(long = "name")]
        names: Vec<String>,
        /// Roles to carry (repeatable); all roles when none is given.
        #[arg(long = "role")]
        roles: Vec<Role>,
        /// Overwrite existing files.
        #[arg(long)]
        force: bool,
    },
    /// Issue another certificate from the CA in --dir (e.g. a narrower one
    /// for a backend-reg sidecar).
    Issue {
        #[arg(long, default_value = "./yarilo-data/internal-tls")]
        dir: PathBuf,
        /// File name stem: writes <stem>.crt and <stem>.key.
        #[arg(long)]
        out: String,
        /// DNS names or IP addresses (the first is the subject).
        #[arg(long = "name", required = true)]
        names: Vec<String>,
        #[arg(long = "role")]
        roles: Vec<Role>,
    },
}

pub fn run(cmd: CertsCmd) -> anyhow::Result<()> {
    match cmd {
        CertsCmd::Init {
            dir,
            server_name,
            names,
            roles,
            force,
        } => init(&dir, &server_name, names, roles, force),
        CertsCmd::Issue {
            dir,
            out,
            names,
            roles,
        } => issue(&dir, &out, &names, &roles),
    }
}

fn init(
    dir: &Path,
    server_name: &str,
    extra: Vec<String>,
    roles: Vec<Role>,
    force: bool,
) -> anyhow::Result<()> {
    let files = ["ca.crt", "ca.key", "tls.crt", "tls.key"];
    if !force {
        if let Some(existing) = files.iter().map(|f| dir.join(f)).find(|p| p.exists()) {
            bail!(
                "{} exists; pass --force to replace the CA and certificate",
                existing.display()
            );
        }
    }
    let roles = if roles.is_empty() {
        Role::ALL.to_vec()
    } else {
        roles
    };
    let ca = Authority::generate("yarilo development CA")?;
    let mut names = vec![server_name.to_string()];
    names.extend(extra);
    let issued = ca.issue(&names, &roles)?;
    write_file(&dir.join("ca.key"), ca.key_pem().as_bytes(), 0o600)?;
    write_file(&dir.join("ca.crt"), ca.cert_pem.as_bytes(), 0o644)?;
    write_pair(dir, "tls", &issued)?;
    let d = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let role_list: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
    println!("wrote {}/{{ca.crt,ca.key,tls.crt,tls.key}}", d.display());
    println!("roles: {}", role_list.join(", "));
    println!("\nConfiguration:\ninternal_tls:\n  enabled: true\n  cert: {0}/tls.crt\n  key: {0}/tls.key\n  ca: {0}/ca.crt\n  server_name: {1}", d.display(), server_name);
    Ok(())
}

fn issue(dir: &Path, out: &str, names: &[String], roles: &[Role]) -> anyhow::Result<()> {
    if out.contains('/') || out.is_empty() {
        bail!("--out is a file name stem, not a path");
    }
    let ca = Authority::load(&dir.join("ca.crt"), &dir.join("ca.key")).with_context(|| {
        format!(
            "no usable CA in {} (run `yarctl certs init` first)",
            dir.display()
        )
    })?;
    let issued = ca.issue(names, roles)?;
    let (c, k) = write_pair(dir, out, &issued)?;
    println!("wrote {} and {}", c.display(), k.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_writes_a_usable_chain_and_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        init(
            dir.path(),
            "yarilo-internal",
            vec!["127.0.0.1".into()],
            vec![],
            false,
        )
        .unwrap();
        let tls = yarilo_tls::internal::InternalTls::build(
            &dir.path().join("tls.crt"),
            &dir.path().join("tls.key"),
            &dir.path().join("ca.crt"),
            "yarilo-internal",
        )
        .unwrap();
        assert!(tls.own_certificate_has_name("yarilo-internal"));
        assert!(init(dir.path(), "x", vec![], vec![], false).is_err());
        issue(
            dir.path(),
            "reg",
            &["backend-reg".into()],
            &[Role::BackendReg],
        )
        .unwrap();
        assert!(dir.path().join("reg.crt").exists());
    }
}
