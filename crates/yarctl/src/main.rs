//! `yarctl`: the administrator's command line.

mod certs;
mod director;
mod pprof;
mod pw;
mod user;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "yarctl", version, about = "Administer a yarilo deployment")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Users of the passwd-file (or SQL) passdb.
    User {
        #[command(subcommand)]
        command: user::UserCmd,
        /// Data directory of `yarilo single` (its passwd-file is DATA/users)
        /// [default: ./yarilo-data]
        #[arg(long, global = true, conflicts_with = "config")]
        data: Option<std::path::PathBuf>,
        /// Configuration file whose passdb to edit.
        #[arg(long, global = true)]
        config: Option<std::path::PathBuf>,
    },
    /// The director's admin API: backends, user map, moves, kicks.
    Director(director::DirectorArgs),
    /// Hash a password in a Dovecot `{SCHEME}` format.
    Pw(pw::PwArgs),
    /// Internal TLS material: a dev CA and certificates with role SANs.
    Certs {
        #[command(subcommand)]
        command: certs::CertsCmd,
    },
    /// Read profiles from `/debug/pprof/*` (`telemetry.pprof`).
    Pprof {
        #[command(subcommand)]
        command: pprof::PprofCmd,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Certs { command } => certs::run(command),
        Command::Pw(args) => pw::run(args),
        Command::Pprof { command } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(pprof::run(command))),
        Command::Director(args) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(director::run(args))),
        Command::User {
            command,
            data,
            config,
        } => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(user::run(command, data, config))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("yarctl: {e:#}");
            ExitCode::FAILURE
        }
    }
}
