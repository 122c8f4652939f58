//! `yarilo-lab`: run a scenario, print the schema, show a substrate's plan.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use yarilo_lab::runner::{self, RunOptions};
use yarilo_lab::scenario::{self, SubstrateKind};

#[derive(Parser)]
#[command(
    name = "yarilo-lab",
    about = "Runs lab scenarios against the complete yarilo system"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one scenario; exit 0 iff every verdict matches the expected one.
    Run {
        scenario: PathBuf,
        /// docker (default: the scenario's first), kind
        #[arg(long)]
        substrate: Option<SubstrateKind>,
        #[arg(long)]
        seed: Option<u64>,
        /// Report directory (default: lab-runs/<name>-<time>)
        #[arg(long)]
        out: Option<PathBuf>,
        /// The scenario's short CI variant.
        #[arg(long)]
        smoke: bool,
        /// Directory with image archives from `images/build` (default: the
        /// lab assembles throwaway images from `--binary`).
        #[arg(long, env = "YARILO_LAB_IMAGES")]
        images: Option<PathBuf>,
        /// The yarilo binary for throwaway images.
        #[arg(long, env = "YARILO_LAB_BINARY")]
        binary: Option<PathBuf>,
        /// Keep the containers after the run (for debugging; clean up with
        /// `yarilo-lab clean`).
        #[arg(long)]
        keep: bool,
    },
    /// Check scenario files without running them.
    Validate { scenarios: Vec<PathBuf> },
    /// Print the scenario JSON Schema.
    Schema,
    /// Print what a substrate would do for a scenario (kind: the objects and
    /// API calls).
    Plan {
        scenario: PathBuf,
        #[arg(long, default_value = "kind")]
        substrate: SubstrateKind,
    },
    /// Remove what a run left behind (by its suffix, or every lab run whose
    /// runner process is gone).
    Clean { suffix: Option<String> },
    /// The sleeping process that holds a pod's network namespace.
    #[command(hide = true)]
    Pause,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("YARILO_LAB_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.cmd {
        Cmd::Pause => yarilo_lab::substrate::pause(),
        Cmd::Schema => {
            print!("{}", scenario::schema_json());
            ExitCode::SUCCESS
        }
        Cmd::Validate { scenarios } => {
            let mut ok = true;
            for p in scenarios {
                match scenario::load(&p) {
                    Ok(s) => println!("{}: ok ({})", p.display(), s.name),
                    Err(e) => {
                        eprintln!("{e}");
                        ok = false;
                    }
                }
            }
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Cmd::Plan {
            scenario,
            substrate,
        } => match runner::plan(&scenario, substrate) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("yarilo-lab: {e:#}");
                ExitCode::from(2)
            }
        },
        Cmd::Clean { suffix } => {
            let rt = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("yarilo-lab: {e}");
                    return ExitCode::from(2);
                }
            };
            match rt.block_on(yarilo_lab::substrate::docker::clean(suffix.as_deref())) {
                Ok(n) => {
                    println!("removed {n} objects");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("yarilo-lab: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Run {
            scenario,
            substrate,
            seed,
            out,
            smoke,
            images,
            binary,
            keep,
        } => {
            let opts = RunOptions {
                scenario,
                substrate,
                seed,
                out,
                smoke,
                images,
                binary,
                keep,
            };
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("yarilo-lab: {e}");
                    return ExitCode::from(2);
                }
            };
            match rt.block_on(runner::run(opts)) {
                Ok(outcome) => {
                    println!("{}", outcome.summary);
                    if outcome.all_as_expected {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("yarilo-lab: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
