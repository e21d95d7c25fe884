//! `fabro serve [--dir DIR] [--bind ADDR|NAME] [--port N] [--token TOKEN] [--workflows DIR]
//! [--max-concurrent-runs N] [--crashed-runs resume|show]`: the web view of the runs and the run
//! service's API.

use std::net::IpAddr;
use std::path::PathBuf;

use fabro::serve::{new_token, percent_encode, serve, ServeOptions};

use super::exit;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The directory holding run directories.
    #[arg(long, default_value = ".fabro/runs")]
    pub dir: PathBuf,
    /// The address to listen on, or a host name for it (then also the name the server answers
    /// to); an address outside loopback (127.0.0.0/8, ::1) needs a token (one is made when none
    /// is given).
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: String,
    /// The port (0: any free port; the URL printed says which).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Required on every request (the printed URL carries it; API clients send
    /// `Authorization: Bearer TOKEN`).
    #[arg(long)]
    pub token: Option<String>,
    /// The directory of workflows the API may start by name (`{"workflow": "path/under/it.dot"}`).
    #[arg(long, value_name = "DIR")]
    pub workflows: Option<PathBuf>,
    /// The most runs started through the API that run at once (default: the number of cores);
    /// the others wait, queued, in the order they came.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_runs: Option<u32>,
    /// What happens to a run the service started whose process died (the machine restarted, the
    /// process was killed): `resume` continues it from its last checkpoint (at most 3 times);
    /// `show` leaves it crashed, to be resumed from the web view or the API.
    #[arg(long, value_enum, value_name = "WHAT", default_value = "resume")]
    pub crashed_runs: CrashedRuns,
}

/// `--crashed-runs`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum CrashedRuns {
    Resume,
    Show,
}

pub fn run(args: ServeArgs) -> u8 {
    super::block_on(run_async(args))
}

async fn run_async(args: ServeArgs) -> u8 {
    let (bind, host_name) = match args.bind.parse::<IpAddr>() {
        Ok(address) => (address, None),
        Err(_) => {
            match tokio::net::lookup_host((args.bind.as_str(), args.port)).await.map(|mut a| a.next()) {
                Ok(Some(address)) => (address.ip(), Some(args.bind.clone())),
                Ok(None) | Err(_) => {
                    eprintln!(
                        "error: --bind `{}` is neither an IP address nor a host name of this machine",
                        args.bind
                    );
                    return exit::INVALID;
                }
            }
        }
    };
    let token = match (&args.token, bind.is_loopback()) {
        (Some(token), _) if token.trim().is_empty() => {
            eprintln!("error: --token is empty");
            return exit::INVALID;
        }
        (Some(token), _) => Some(token.clone()),
        (None, true) => None,
        (None, false) => match new_token() {
            Ok(token) => Some(token),
            Err(error) => {
                eprintln!("error: cannot make a token: {error}");
                return exit::FAILED;
            }
        },
    };
    let fabro_exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(error) => {
            eprintln!("error: cannot find the fabro executable to resume runs with: {error}");
            return exit::FAILED;
        }
    };
    let listener = match tokio::net::TcpListener::bind((bind, args.port)).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("error: cannot listen on {}:{}: {error}", bind, args.port);
            return exit::INVALID;
        }
    };
    let address = match listener.local_addr() {
        Ok(address) => address,
        Err(error) => {
            eprintln!("error: {error}");
            return exit::FAILED;
        }
    };
    let shown = if bind.is_unspecified() { "127.0.0.1".parse().unwrap_or(bind) } else { bind };
    // Percent-encoded: a token with `&`, spaces or `%` still comes back whole.
    let query = token.as_ref().map(|token| format!("?token={}", percent_encode(token))).unwrap_or_default();
    let host = match (&host_name, shown) {
        (Some(name), _) => name.clone(),
        (None, IpAddr::V6(v6)) => format!("[{v6}]"),
        (None, IpAddr::V4(v4)) => v4.to_string(),
    };
    println!("fabro serve: http://{host}:{}/{query}", address.port());
    println!("serving the runs in {} (Ctrl-C stops)", args.dir.display());
    let service_dir = match std::env::current_dir() {
        Ok(dir) => dir,
        Err(error) => {
            eprintln!("error: cannot read the current directory: {error}");
            return exit::FAILED;
        }
    };
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let options = ServeOptions {
        runs_dir: args.dir.clone(),
        token,
        fabro_exe,
        host_name,
        workflows_dir: args.workflows.map(|dir| std::path::absolute(&dir).unwrap_or(dir)),
        max_concurrent_runs: args.max_concurrent_runs.map_or(cores, |n| n as usize),
        service_dir,
        resume_crashed_runs: matches!(args.crashed_runs, CrashedRuns::Resume),
    };
    tokio::select! {
        served = serve(listener, options) => match served {
            Ok(()) => exit::SUCCESS,
            Err(error) => {
                eprintln!("error: {error}");
                exit::FAILED
            }
        },
        _ = tokio::signal::ctrl_c() => exit::SUCCESS,
    }
}
