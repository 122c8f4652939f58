//! `yarctl pprof top`: reads a profile a component served on
//! `/debug/pprof/*` (or a saved file) and prints its top functions, as
//! `go tool pprof -top` does, for hosts without Go.

use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum PprofCmd {
    /// The functions with the most samples in a profile.
    Top {
        /// A file, or an `http://` URL of a running component's profile
        /// (e.g. `http://127.0.0.1:9090/debug/pprof/profile?seconds=30`).
        source: String,
        /// How many functions to show.
        #[arg(long, default_value_t = 20)]
        count: usize,
        /// Also write the raw profile here (for `go tool pprof` elsewhere).
        #[arg(long)]
        save: Option<PathBuf>,
    },
}

pub async fn run(cmd: PprofCmd) -> anyhow::Result<()> {
    match cmd {
        PprofCmd::Top {
            source,
            count,
            save,
        } => {
            let bytes = if source.starts_with("http://") || source.starts_with("https://") {
                let r = reqwest::Client::new()
                    .get(&source)
                    .timeout(std::time::Duration::from_secs(330))
                    .send()
                    .await?;
                let status = r.status();
                let body = r.bytes().await?;
                if !status.is_success() {
                    anyhow::bail!(
                        "{source}: {status}: {}",
                        String::from_utf8_lossy(&body).trim()
                    );
                }
                body.to_vec()
            } else {
                std::fs::read(&source).map_err(|e| anyhow::anyhow!("cannot read {source}: {e}"))?
            };
            if let Some(path) = save {
                std::fs::write(&path, &bytes)?;
            }
            let profile = yarilo_telemetry::profiling::decode(&bytes)?;
            print!("{}", yarilo_telemetry::profiling::top(&profile, count));
            Ok(())
        }
    }
}
