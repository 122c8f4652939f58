//! `yarilo`: every server component of the project in one executable.
//!
//! `yarilo <component>` runs one component; invoked through a link named
//! `yarilo-<component>` (the process names of the design documents) it runs
//! that component as if it had been given as the first argument.

mod backend;
mod component;
mod dispatch;
mod mail;
mod probes;
mod quota_status;
mod runtime;
mod services;
mod single;
mod telemetry;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's start-up options: the heap profiler compiled in and
/// inactive (`telemetry.pprof.heap_enabled` activates it), one sample per
/// 512 KiB allocated on average.
#[allow(unsafe_code, non_upper_case_globals)]
#[export_name = "malloc_conf"]
pub static malloc_conf: &[u8] = b"prof:true,prof_active:false,lg_prof_sample:19\0";

#[derive(Parser)]
#[command(
    name = "yarilo",
    version,
    about = "A clustered mail server on Dovecot's director model"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every protocol and service in one process, on local disk.
    Single(single::SingleArgs),
    /// Authentication for login pods and backends: AUTH, VERIFY (`auth_service`).
    Auth(component::ComponentArgs),
    /// The lock service writers serialize through (`locks_service`).
    Locks(component::ComponentArgs),
    /// Limits, auth-failure penalties and the kick bus (`warden_service`).
    Warden(component::ComponentArgs),
    /// Routes users to backends: LOOKUP, registration, admin API (`director_service`).
    Director(component::ComponentArgs),
    /// Registers this backend pod with the directors (`backend_register`).
    BackendReg(component::ComponentArgs),
    /// The IMAP backend behind login proxies: accepts the YARILO preamble (`services.imap`).
    Imap(component::ComponentArgs),
    /// The IMAP login proxy: TLS, LOGIN/AUTHENTICATE, then a pipe to the backend (`login.imap`).
    ImapLogin(component::ComponentArgs),
    /// The POP3 backend behind login proxies: accepts the YARILO preamble (`services.pop3`).
    Pop3(component::ComponentArgs),
    /// The POP3 login proxy: TLS, USER/PASS/AUTH, then a pipe to the backend (`login.pop3`).
    Pop3Login(component::ComponentArgs),
    /// The submission backend behind login proxies: preamble, then relays (`services.submission`).
    Submission(component::ComponentArgs),
    /// The submission login proxy: TLS, EHLO, AUTH, then a pipe to the backend (`login.submission`).
    SubmissionLogin(component::ComponentArgs),
    /// The LMTP backend: delivery into the store, XCLIENT from trusted peers (`services.lmtp`).
    Lmtp(component::ComponentArgs),
    /// The LMTP proxy: per-recipient userdb lookup and routing (`login.lmtp`).
    LmtpLogin(component::ComponentArgs),
    /// The Postfix quota policy service: is there room for this recipient (`quota_status`).
    QuotaStatus(component::ComponentArgs),
    /// Print the components reachable as `yarilo-<component>` links, one a
    /// line (the image and package builders make one link each).
    #[command(hide = true)]
    Links,
    /// Check or show the configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a configuration file; exit 0 if it can be used.
    Check {
        /// Configuration file.
        #[arg(long, env = "YARILO_CONFIG", default_value = yarilo_config::DEFAULT_CONFIG_PATH)]
        config: PathBuf,
    },
    /// Print the effective configuration, every default filled in, secrets hidden.
    Dump {
        /// Configuration file; without it, the embedded `single` default.
        #[arg(long, env = "YARILO_CONFIG")]
        config: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(dispatch::effective_args(std::env::args_os()));
    let result = match cli.command {
        Command::Single(args) => single::main(args),
        Command::Auth(args) => services::auth(args),
        Command::Locks(args) => services::locks(args),
        Command::Warden(args) => services::warden(args),
        Command::Director(args) => services::director(args),
        Command::BackendReg(args) => services::backend_reg(args),
        Command::Imap(args) => backend::imap(args),
        Command::ImapLogin(args) => backend::imap_login(args),
        Command::Pop3(args) => backend::pop3(args),
        Command::Pop3Login(args) => backend::pop3_login(args),
        Command::Submission(args) => backend::submission(args),
        Command::SubmissionLogin(args) => backend::submission_login(args),
        Command::Lmtp(args) => backend::lmtp(args),
        Command::LmtpLogin(args) => backend::lmtp_login(args),
        Command::QuotaStatus(args) => quota_status::quota_status(args),
        Command::Links => {
            for component in dispatch::LINKED {
                println!("{component}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Config { command } => config_command(command),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("yarilo: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn config_command(command: ConfigCommand) -> anyhow::Result<ExitCode> {
    match command {
        ConfigCommand::Check { config } => match yarilo_config::Config::load(&config) {
            Ok(_) => {
                println!("{}: ok", config.display());
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("{e}");
                Ok(ExitCode::FAILURE)
            }
        },
        ConfigCommand::Dump { config } => {
            let cfg = match config {
                Some(path) => yarilo_config::Config::load(&path)?,
                None => single::embedded_default()?,
            };
            print!("{}", cfg.to_yaml()?);
            Ok(ExitCode::SUCCESS)
        }
    }
}
