//! `fabro completions bash|zsh|fish`

use super::exit;

/// The shells completions can be generated for.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell to print completions for.
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(args: CompletionsArgs) -> u8 {
    let shell = match args.shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut command = super::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "fabro", &mut out);
    match std::io::Write::write_all(&mut std::io::stdout().lock(), &out) {
        Ok(()) => exit::SUCCESS,
        // A closed pipe (`fabro completions bash | head`) is not an error worth reporting.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => exit::SUCCESS,
        Err(error) => {
            eprintln!("error: cannot write the completions: {error}");
            exit::FAILED
        }
    }
}
