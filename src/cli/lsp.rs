//! `fabro lsp [--stdio]`: the language server for workflow files, over stdin and stdout.

use super::exit;

#[derive(clap::Args)]
pub struct LspArgs {
    /// Talk LSP over stdin and stdout (the only transport; accepted because editors pass it).
    #[arg(long)]
    pub stdio: bool,
}

pub fn run(_args: LspArgs) -> u8 {
    match fabro::lsp::serve_stdio() {
        Ok(()) => exit::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            exit::FAILED
        }
    }
}
