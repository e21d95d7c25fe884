//! The `fabro` command: a thin layer over the library that parses arguments and prints.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
