//! `yarctl user add|del|passwd|list|show`: users of the passwd-file
//! (`<data>/users`, the file `yarilo single` reads) or of the first
//! passwd-file / sql passdb of a config file. A running server sees the
//! change on the next login, without a restart.

use std::io::BufRead as _;
use std::path::PathBuf;

use anyhow::Context as _;
use yarilo_auth::admin::UserStore;

#[derive(clap::Subcommand, Debug)]
pub enum UserCmd {
    /// Create a user.
    Add {
        name: String,
        /// The password; `-` or absent reads one line from standard input.
        #[arg(long, short = 'p')]
        password: Option<String>,
        /// Password scheme (default `auth.new_pass_scheme`, ARGON2ID).
        #[arg(long, short = 's')]
        scheme: Option<String>,
    },
    /// Remove a user (mail is left on disk).
    Del { name: String },
    /// Change a user's password.
    Passwd {
        name: String,
        #[arg(long, short = 'p')]
        password: Option<String>,
        #[arg(long, short = 's')]
        scheme: Option<String>,
    },
    /// List user names.
    List,
    /// Show a user's scheme and fields (never the hash).
    Show { name: String },
    /// Create the `users` table the default SQL queries use, if missing
    /// (nothing to do for a passwd-file).
    InitDb,
}

fn password_arg(given: Option<String>) -> anyhow::Result<String> {
    match given.as_deref() {
        Some(p) if p != "-" => Ok(p.to_string()),
        _ => {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .context("reading the password from standard input")?;
            Ok(line.trim_end_matches(['\r', '\n']).to_string())
        }
    }
}

/// Runs one `yarctl user` command. `data` is `--data DIR`, `config`
/// `--config FILE`; with neither, `./yarilo-data/users`.
pub async fn run(
    cmd: UserCmd,
    data: Option<PathBuf>,
    config: Option<PathBuf>,
) -> anyhow::Result<()> {
    let store = UserStore::open(data.as_deref(), config.as_deref())?;
    match cmd {
        UserCmd::Add {
            name,
            password,
            scheme,
        } => {
            let password = password_arg(password)?;
            let user = store.add(&name, &password, scheme.as_deref()).await?;
            println!("added {user} to {}", store.describe());
        }
        UserCmd::Del { name } => {
            let user = store.delete(&name).await?;
            println!("removed {user} from {}", store.describe());
        }
        UserCmd::Passwd {
            name,
            password,
            scheme,
        } => {
            let password = password_arg(password)?;
            let user = store
                .set_password(&name, &password, scheme.as_deref())
                .await?;
            println!("changed the password of {user}");
        }
        UserCmd::InitDb => {
            if store.init_db().await? {
                println!("users table ready in {}", store.describe());
            } else {
                println!("{} is a passwd-file: nothing to create", store.describe());
            }
        }
        UserCmd::List => {
            for user in store.list().await? {
                println!("{user}");
            }
        }
        UserCmd::Show { name } => match store.show(&name).await? {
            Some(info) => {
                println!("user: {}", info.user);
                println!(
                    "scheme: {}",
                    info.scheme.as_deref().unwrap_or("(none: cannot log in)")
                );
                for (k, v) in info.fields.iter() {
                    println!("{k}: {v}");
                }
            }
            None => anyhow::bail!("no user {name} in {}", store.describe()),
        },
    }
    Ok(())
}
