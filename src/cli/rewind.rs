//! `fabro rewind RUN --to NODE[@VISIT]`: move a stopped run back to the state right after one
//! stage visit; what came later moves into `rewound/<timestamp>/`, nothing is deleted.

use super::exit;

#[derive(clap::Args)]
pub struct Args {
    /// The run (not running: its lock is taken).
    #[command(flatten)]
    pub target: super::RunRef,
    /// The stage visit to go back to: NODE (its last visit) or NODE@VISIT.
    #[arg(long, value_name = "NODE[@VISIT]")]
    pub to: String,
}

pub fn run(args: Args) -> u8 {
    let target = match args.target.dir() {
        Ok(dir) => dir,
        Err(code) => return code,
    };
    let rewound = fabro::run_dir::parse_target(&args.to)
        .and_then(|(node, visit)| fabro::run_dir::rewind(&target, &node, visit));
    match rewound {
        Ok(rewound) => {
            let root = target.display();
            println!(
                "rewound {root} to right after {}@{}; moved {} item(s) into {root}/{}",
                rewound.node,
                rewound.visit,
                rewound.moved.len(),
                rewound.archive
            );
            println!("continue with: fabro resume {root} (next stage: {})", rewound.next_node);
            exit::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            exit::INVALID
        }
    }
}
