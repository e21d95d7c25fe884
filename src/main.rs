//! The `fabro` command: a thin layer over the library that parses arguments and prints.

mod cli;

fn main() -> std::process::ExitCode {
    // Started by a container sandbox to run one program in its container.
    if let Some(code) = fabro::sandbox::container::exec_helper_main() {
        return std::process::ExitCode::from(code);
    }
    cli::main()
}
