//! `fabro serve [--dir DIR] [--bind ADDR|NAME] [--port N] [--token TOKEN]`: the web view of the runs.

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
    /// Required on every request (the printed URL carries it).
    #[arg(long)]
    pub token: Option<String>,
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
    let options = ServeOptions { runs_dir: args.dir.clone(), token, fabro_exe, host_name };
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
