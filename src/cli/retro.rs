//! `fabro retro RUN|--last [--no-narrative]`: a run's retrospective, written as `retro.json` and
//! `retro.md` in its directory (also `fabro run --retro`).

use std::path::Path;

use fabro::backends::config::LlmConfig;
use fabro::backends::live::LiveBackend;
use fabro::report::retro::Retro;

use super::exit;
use fabro::run_dir::layout;

#[derive(clap::Args)]
pub struct RetroArgs {
    #[command(flatten)]
    pub run: super::RunRef,
    /// Only the deterministic part, even when a provider is configured.
    #[arg(long)]
    pub no_narrative: bool,
}

pub fn run(args: RetroArgs) -> u8 {
    let root = match args.run.dir() {
        Ok(dir) => dir,
        Err(code) => return code,
    };
    super::block_on(async move {
        match write(&root, !args.no_narrative).await {
            Ok(()) => {
                println!("{}", root.join(layout::RETRO_MD).display());
                exit::SUCCESS
            }
            Err(message) => {
                eprintln!("error: {message}");
                exit::INVALID
            }
        }
    })
}

/// How long the narrative waits for a provider that cannot be reached.
const NARRATIVE_RETRY_WINDOW: std::time::Duration = std::time::Duration::from_secs(5);

/// Writes the retrospective of the run in `root`; with `narrative`, a configured provider adds
/// its reading of the run (a provider that fails leaves a warning and the deterministic part).
pub async fn write(root: &Path, narrative: bool) -> Result<(), String> {
    let mut retro = Retro::read(root).map_err(|error| error.to_string())?;
    if narrative {
        match LlmConfig::from_env() {
            Ok(mut config) if config.has_providers() => {
                // The narrative is an extra: a provider that is away holds the retrospective up
                // only briefly.
                config.limit_retry_window(NARRATIVE_RETRY_WINDOW);
                match LiveBackend::new(config) {
                    Ok(backend) => match retro.narrate(root, &backend).await {
                        Ok(narrative) => retro.narrative = Some(narrative),
                        Err(message) => eprintln!("warning: the retrospective has no narrative: {message}"),
                    },
                    Err(error) => eprintln!("warning: the retrospective has no narrative: {error}"),
                }
            }
            Ok(_) => eprintln!("note: no LLM provider is configured, so the retrospective has no narrative"),
            Err(error) => eprintln!("warning: the retrospective has no narrative: {error}"),
        }
    }
    retro.write(root).map_err(|error| error.to_string())
}
