//! `fabro fork RUN --at NODE[@VISIT] [--run-dir NEW_DIR]`: a new run holding the state right
//! after one stage visit of an existing run, ready for `fabro resume`.

use std::path::PathBuf;

use super::exit;

#[derive(clap::Args)]
pub struct Args {
    /// The run to fork (it is only read).
    #[command(flatten)]
    pub target: super::RunRef,
    /// The stage visit to fork after: NODE (its last visit) or NODE@VISIT.
    #[arg(long, value_name = "NODE[@VISIT]")]
    pub at: String,
    /// The new run directory (default: beside RUN_DIR, named by the new run id).
    #[arg(long, value_name = "NEW_DIR")]
    pub run_dir: Option<PathBuf>,
}

pub fn run(args: Args) -> u8 {
    let target = match args.target.dir() {
        Ok(dir) => dir,
        Err(code) => return code,
    };
    let forked = fabro::run_dir::parse_target(&args.at)
        .and_then(|(node, visit)| fabro::run_dir::fork(&target, &node, visit, args.run_dir.as_deref()));
    match forked {
        Ok(forked) => {
            println!(
                "forked {} after {}@{} as run {} in {}",
                forked.origin.run_id,
                forked.origin.node,
                forked.origin.visit,
                forked.run_id,
                forked.run_dir.display()
            );
            println!(
                "continue with: fabro resume {} (next stage: {})",
                forked.run_dir.display(),
                forked.next_node
            );
            exit::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            exit::INVALID
        }
    }
}
