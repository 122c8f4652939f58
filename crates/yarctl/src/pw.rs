//! `yarctl pw`: hash a password with a Dovecot-compatible `{SCHEME}`
//! prefix, or test one, like `doveadm pw`.

use anyhow::bail;
use yarilo_auth::{hash_password, Scheme};

#[derive(clap::Args, Debug)]
pub struct PwArgs {
    /// Scheme (default ARGON2ID). `--list` shows them all.
    #[arg(long, short = 's', default_value = "ARGON2ID")]
    pub scheme: String,
    /// The password; absent reads one line from standard input.
    #[arg(long, short = 'p')]
    pub password: Option<String>,
    /// Test the password against this stored hash instead of hashing.
    #[arg(long, short = 't')]
    pub test: Option<String>,
    /// List the supported schemes.
    #[arg(long, short = 'l')]
    pub list: bool,
}

pub fn run(args: PwArgs) -> anyhow::Result<()> {
    if args.list {
        println!("{}", Scheme::names().join(" "));
        return Ok(());
    }
    let password = match args.password {
        Some(p) => p,
        None => {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
            line.trim_end_matches(['\r', '\n']).to_string()
        }
    };
    if let Some(stored) = args.test {
        if yarilo_auth::admin::test_password(&stored, &password)? {
            println!("{stored} (verified)");
            return Ok(());
        }
        bail!("password mismatch");
    }
    let (scheme, _) = Scheme::parse(&args.scheme)?;
    println!("{}", hash_password(scheme, &password)?);
    Ok(())
}
