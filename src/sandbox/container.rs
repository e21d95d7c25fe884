//! The container sandboxes (`sandbox=podman`, `sandbox=docker`): stages' programs run in an OCI
//! container, through the Docker-compatible API that both Docker and Podman serve (bollard), so a
//! remote container host is a URL away (`CONTAINER_HOST`, `DOCKER_HOST`).
//!
//! One container serves a run and an image: the first program that needs it creates and starts
//! it, later ones `exec` into it, and the run's end removes it ([`remove_session_containers`]).
//! The container shows the work directory at its own path (writable), the run directory
//! read-only but for its `stages/` (the stage directories, writable), the work directory's
//! `.fabro/` read-only, the `sandbox_paths`, and nothing else of the host: its own `/tmp`, no
//! network unless `sandbox_network=true`, no capabilities, and the user of the work directory's
//! owner, so what it writes is not root's on the host. Which container a program runs in is
//! keyed by everything fixed at creation (image, limits, network, mounts) and by this fabro
//! process: a stage asking for other mounts or another network gets a container of its own.
//!
//! fabro's process machinery stays as it is: [`Confinement::command`](super::Confinement) returns
//! a command that starts fabro itself as a small exec client ([`EXEC_HELPER_ARG`], run by
//! [`exec_helper_main`]) which makes sure the container runs, execs the program there, relays
//! stdin, stdout and stderr, and exits with the program's exit code. Timeouts, output limits and
//! cancellation stop the client's process group as they stop any stage's; the client then kills
//! what the program started in the container (every process carrying its exec's marker in its
//! environment), SIGTERM and then SIGKILL within fabro's grace period. If fabro is killed
//! outright, its watcher kills the clients; the containers stay until the next `fabro resume`
//! of the run removes them ([`remove_run_containers`]), as it kills a stage's process group.
//!
//! What it must never do: take a setting fabro would not take on an ordinary host (a runtime,
//! ulimits); those belong to the container engine's own configuration.

use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use bollard::Docker;
use futures::StreamExt;
use sha2::Digest;

use crate::graph::settings::SandboxKind;

/// The first argument that makes the `fabro` binary the exec client ([`exec_helper_main`]).
pub const EXEC_HELPER_ARG: &str = "__container-exec";

/// Labels put on every container fabro starts.
pub const LABEL_RUN_DIR: &str = "fabro.run_dir";
pub const LABEL_SESSION: &str = "fabro.session";
pub const LABEL_IMAGE: &str = "fabro.image";

/// This fabro process: the containers it started carry it, and only they are reused.
static SESSION: LazyLock<String> = LazyLock::new(|| uuid::Uuid::now_v7().simple().to_string());

/// The daemons this process has sent programs to, for [`remove_session_containers`].
static HOSTS_USED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// How long the first answer of a daemon may take (ping, inspect, create).
const API_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a preflight waits for the daemon to answer its ping.
const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the program gets after SIGTERM before SIGKILL: within fabro's own grace period
/// ([`crate::process_group::KILL_GRACE`]), after which fabro kills the client.
const TERM_GRACE: Duration = Duration::from_millis(1500);
/// How often the client asks whether the program has ended, besides watching its output.
const EXEC_POLL: Duration = Duration::from_millis(200);

/// What a container sandbox needs of a stage, fixed when its container is created.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct ContainerSpec {
    /// `image`; empty when `devcontainer` names the image.
    pub image: String,
    /// `devcontainer`: `true` or a path, relative to the work directory.
    pub devcontainer: Option<String>,
    /// `container_cpus` in billionths of a CPU.
    pub nano_cpus: Option<i64>,
    /// `container_memory` in bytes.
    pub memory: Option<i64>,
    /// `container_pids`.
    pub pids: Option<i64>,
}

/// Why a container sandbox cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContainerError {
    #[error(
        "stage(s) {stages} run in a {kind} container, but no {kind} service answers here ({detail}); {fix}, \
         or set CONTAINER_HOST (or DOCKER_HOST) to the address of a running one"
    )]
    Missing { kind: &'static str, stages: String, detail: String, fix: &'static str },
    #[error("stage(s) {stages} run in a {kind} container, but {host} does not answer: {detail}; {fix}")]
    Unreachable { kind: &'static str, stages: String, host: String, detail: String, fix: &'static str },
    #[error("`{host}` is not a container host address fabro can use; use unix:///path/to.sock, tcp://host:port or http://host:port")]
    BadHost { host: String },
    #[error("stage `{node}` runs in a {kind} container but names no image; set image=\"debian:12\" (say) on it or on the graph")]
    NoImage { node: String, kind: &'static str },
    #[error(
        "image `{image}` is not on {host} and could not be pulled: {detail}; build or pull it there first"
    )]
    ImageUnavailable { image: String, host: String, detail: String },
    #[error("the container for image `{image}` could not be started on {host}: {detail}")]
    Start { image: String, host: String, detail: String },
    #[error("{host}: {detail}")]
    Api { host: String, detail: String },
    #[error("the devcontainer image `{image}` could not be built: {detail}")]
    Build { image: String, detail: String },
}

/// The address of the daemon a `kind` sandbox talks to: `CONTAINER_HOST`, else `DOCKER_HOST`
/// (for Docker the other way round), else the first of the usual sockets that exists (Podman:
/// rootful `/run/podman/podman.sock`, then the user's `$XDG_RUNTIME_DIR/podman/podman.sock`;
/// Docker: `/var/run/docker.sock`; each also tries the other's). `None` when there is none.
pub fn host_address(kind: SandboxKind) -> Option<String> {
    let variables = match kind {
        SandboxKind::Docker => ["DOCKER_HOST", "CONTAINER_HOST"],
        _ => ["CONTAINER_HOST", "DOCKER_HOST"],
    };
    for name in variables {
        if let Some(value) = std::env::var(name).ok().filter(|value| !value.trim().is_empty()) {
            return Some(value.trim().to_string());
        }
    }
    let mut podman = vec![PathBuf::from("/run/podman/podman.sock")];
    if let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR") {
        podman.push(Path::new(&runtime).join("podman/podman.sock"));
    }
    let docker = vec![PathBuf::from("/var/run/docker.sock")];
    let candidates = match kind {
        SandboxKind::Docker => [docker, podman].concat(),
        _ => [podman, docker].concat(),
    };
    candidates.into_iter().find(|path| path.exists()).map(|path| format!("unix://{}", path.display()))
}

/// A client of the daemon at `host`.
fn connect(host: &str) -> Result<Docker, ContainerError> {
    let bad = || ContainerError::BadHost { host: host.to_string() };
    let docker = if let Some(path) = host.strip_prefix("unix://") {
        Docker::connect_with_unix(path, API_TIMEOUT.as_secs(), bollard::API_DEFAULT_VERSION)
    } else if host.starts_with("tcp://") || host.starts_with("http://") {
        Docker::connect_with_http(host, API_TIMEOUT.as_secs(), bollard::API_DEFAULT_VERSION)
    } else if host.starts_with('/') {
        Docker::connect_with_unix(host, API_TIMEOUT.as_secs(), bollard::API_DEFAULT_VERSION)
    } else {
        return Err(bad());
    };
    docker.map_err(|_| bad())
}

fn api_error(host: &str, error: impl std::fmt::Display) -> ContainerError {
    ContainerError::Api { host: host.to_string(), detail: error.to_string() }
}

/// How to install or start the daemon of `kind`.
fn fix_for(kind: SandboxKind) -> &'static str {
    match kind {
        SandboxKind::Docker => {
            "install Docker (Debian/Ubuntu: `apt-get install docker.io`) and start it (`systemctl start docker`)"
        }
        _ => {
            "install Podman (Debian/Ubuntu: `apt-get install podman`) and start its API service \
             (`systemctl enable --now podman.socket`, or `podman system service --time=0 \
             unix:///run/podman/podman.sock &`)"
        }
    }
}

/// Runs `future` to its end on a runtime of its own, from sync code inside or outside one.
fn block_on<T: Send + 'static>(future: impl std::future::Future<Output = T> + Send + 'static) -> Option<T> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
        Some(runtime.block_on(future))
    })
    .join()
    .ok()
    .flatten()
}

/// The preflight of the container sandboxes: that the daemon of `kind` answers and has every
/// image of `images` (pulling the ones it lacks). `stages` names the stages, for the error.
pub fn check(kind: SandboxKind, stages: &str, images: &BTreeSet<String>) -> Result<(), ContainerError> {
    let Some(host) = host_address(kind) else {
        return Err(ContainerError::Missing {
            kind: kind.as_str(),
            stages: stages.to_string(),
            detail: "no CONTAINER_HOST or DOCKER_HOST, and no socket at the usual places".into(),
            fix: fix_for(kind),
        });
    };
    let unreachable = |detail: String| ContainerError::Unreachable {
        kind: kind.as_str(),
        stages: stages.to_string(),
        host: host.clone(),
        detail,
        fix: fix_for(kind),
    };
    if let Some(path) = host.strip_prefix("unix://").filter(|path| !Path::new(path).exists()) {
        return Err(unreachable(format!("there is no socket at {path}")));
    }
    let docker = connect(&host)?;
    let answered = block_on({
        let docker = docker.clone();
        async move { tokio::time::timeout(PING_TIMEOUT, docker.ping()).await }
    });
    match answered {
        None => return Err(unreachable("the check could not run".into())),
        Some(Err(_)) => return Err(unreachable(format!("no answer within {}s", PING_TIMEOUT.as_secs()))),
        Some(Ok(Err(error))) => return Err(unreachable(error.to_string())),
        Some(Ok(Ok(_))) => {}
    }
    let images = images.clone();
    block_on(async move {
        for image in &images {
            ensure_image(&docker, &host, image).await?;
        }
        Ok(())
    })
    .unwrap_or(Ok(()))
}

/// That `image` is on the daemon, pulling it when it is not.
async fn ensure_image(docker: &Docker, host: &str, image: &str) -> Result<(), ContainerError> {
    if docker.inspect_image(image).await.is_ok() {
        return Ok(());
    }
    let options = bollard::query_parameters::CreateImageOptionsBuilder::default().from_image(image).build();
    let mut pull = docker.create_image(Some(options), None, None);
    while let Some(step) = pull.next().await {
        if let Err(error) = step {
            return Err(ContainerError::ImageUnavailable {
                image: image.to_string(),
                host: host.to_string(),
                detail: error.to_string(),
            });
        }
    }
    docker.inspect_image(image).await.map(drop).map_err(|error| ContainerError::ImageUnavailable {
        image: image.to_string(),
        host: host.to_string(),
        detail: error.to_string(),
    })
}

/// What the exec client is asked to do, passed to it as JSON in its arguments. The program's
/// environment is the client's own, which [`command`] set up.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct ExecRequest {
    host: String,
    session: String,
    spec: ContainerSpec,
    network: bool,
    run_dir: Option<PathBuf>,
    work_dir: PathBuf,
    /// Host paths shown at the same path: (path, writable), outermost first.
    mounts: Vec<(PathBuf, bool)>,
    /// `uid:gid` of the work directory's owner.
    user: Option<String>,
    /// The directories the program writes besides the work directory (its stage directory).
    writable: Vec<PathBuf>,
    /// `NAME=value` the container and its programs get (a devcontainer's `containerEnv`).
    env: Vec<String>,
    /// What runs once in a new container before any program (`postCreateCommand`).
    post_create: Option<Vec<String>>,
}

impl ExecRequest {
    /// The name of the container this request runs in: everything fixed at its creation, hashed.
    fn container_name(&self) -> String {
        let key = serde_json::to_vec(&(
            &self.host,
            &self.session,
            &self.spec,
            self.network,
            &self.work_dir,
            &self.mounts,
            &self.user,
            &self.env,
            &self.post_create,
        ))
        .unwrap_or_default();
        let digest = sha2::Sha256::digest(&key);
        let hex: String = digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect();
        format!("fabro-{hex}")
    }
}

/// Environment variables the program gets from the host besides `sandbox_env` and what the
/// caller sets (`FABRO_*`): not PATH, HOME or USER, which are the image's.
const HOST_ENV: &[&str] = &["LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ"];

/// What a container sandbox is given to build a command: see [`super::Setup`].
pub struct ExecSetup<'a> {
    pub kind: SandboxKind,
    pub spec: Option<&'a ContainerSpec>,
    pub network: bool,
    pub binds: &'a [crate::graph::settings::Bind],
    pub pass_env: &'a [String],
    pub work_dir: &'a Path,
    pub writable: &'a [&'a Path],
    pub protected: Vec<PathBuf>,
}

/// The command that runs `program args` in the container `setup` describes: fabro's exec client.
pub fn command(program: &OsStr, args: &[&OsStr], setup: &ExecSetup<'_>) -> tokio::process::Command {
    let host = host_address(setup.kind).unwrap_or_default();
    HOSTS_USED.lock().unwrap_or_else(PoisonError::into_inner).insert(host.clone());
    let work_dir = std::path::absolute(setup.work_dir).unwrap_or_else(|_| setup.work_dir.to_path_buf());
    let user = user_for(&host, &work_dir);
    let request = ExecRequest {
        host,
        session: SESSION.clone(),
        spec: setup.spec.cloned().unwrap_or_else(|| ContainerSpec {
            image: String::new(),
            devcontainer: None,
            nano_cpus: None,
            memory: None,
            pids: None,
        }),
        network: setup.network,
        run_dir: setup.protected.first().cloned(),
        work_dir: work_dir.clone(),
        mounts: mounts(&work_dir, setup),
        user,
        writable: setup.writable.iter().map(|path| path.to_path_buf()).collect(),
        env: Vec::new(),
        post_create: None,
    };
    let request = with_devcontainer(request);
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("fabro"));
    let mut command = tokio::process::Command::new(exe);
    command
        .arg(EXEC_HELPER_ARG)
        .arg(serde_json::to_string(&request).unwrap_or_default())
        .arg(program)
        .args(args)
        .current_dir(&work_dir)
        .env_clear();
    for name in HOST_ENV.iter().copied().chain(setup.pass_env.iter().map(String::as_str)) {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
}

/// `request` with its devcontainer's image, environment, user and `postCreateCommand` (read by
/// the check before the run, so from memory); unchanged without one. A devcontainer that cannot
/// be read leaves the image empty, which the client reports.
fn with_devcontainer(mut request: ExecRequest) -> ExecRequest {
    let Some(written) = request.spec.devcontainer.clone() else { return request };
    match super::devcontainer::load(&request.work_dir, &written) {
        Ok(dev) => {
            request.spec.image = dev.image_name().to_string();
            request.env = dev.env.iter().map(|(name, value)| format!("{name}={value}")).collect();
            if let Some(user) = dev.user {
                request.user = Some(user);
            }
            request.post_create = dev.post_create;
        }
        Err(error) => tracing::warn!(%error, "devcontainer not read"),
    }
    request
}

/// The host paths the container shows, outermost first (a later mount covers what an earlier one
/// showed below it): the work directory writable; the protected directories (the run directory
/// first, the work directory's `.fabro/`) read-only; the run directory's `stages/` writable; a
/// writable directory inside a protected one is shown writable by the protected directory's child
/// that holds it; the `sandbox_paths`.
fn mounts(work_dir: &Path, setup: &ExecSetup<'_>) -> Vec<(PathBuf, bool)> {
    let mut mounts: Vec<(PathBuf, bool)> = vec![(work_dir.to_path_buf(), true)];
    for dir in &setup.protected {
        mounts.push((dir.clone(), false));
    }
    // Every stage directory of the run, so that each program of the run (a command stage, an
    // agent's shell command, an MCP server) has the same mounts, and one container serves them.
    if let Some(run_dir) = setup.protected.first() {
        mounts.push((run_dir.join("stages"), true));
    }
    for path in setup.writable {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let shown = setup
            .protected
            .iter()
            .filter_map(|dir| {
                let first = path.strip_prefix(dir).ok()?.components().next()?;
                Some(dir.join(first))
            })
            .max_by_key(|shown| shown.components().count())
            .unwrap_or(path);
        mounts.push((shown, true));
    }
    for bind in setup.binds {
        mounts.push((bind.path.clone(), bind.writable));
    }
    // One mount per path (a service refuses two at one place): the one given last says how.
    let mut unique: Vec<(PathBuf, bool)> = Vec::with_capacity(mounts.len());
    for (path, writable) in mounts.into_iter().filter(|(path, _)| path.exists()) {
        match unique.iter_mut().find(|(known, _)| *known == path) {
            Some(known) => known.1 = writable,
            None => unique.push((path, writable)),
        }
    }
    unique.sort_by_key(|(path, _)| path.components().count());
    unique
}

/// Who programs run as in a container on `host` working in `work_dir`: the work directory's
/// owner, so what they write is that user's on the host. A rootless service (its socket is not
/// root's) maps the container's root to the user running it: there the owner, when that is this
/// user, is `0:0` inside.
fn user_for(host: &str, work_dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(work_dir).ok()?;
    let rootless = host
        .strip_prefix("unix://")
        .and_then(|socket| std::fs::metadata(socket).ok())
        .is_some_and(|socket| socket.uid() != 0);
    // SAFETY: geteuid has no preconditions.
    if rootless && owner.uid() == unsafe { libc::geteuid() } {
        return Some("0:0".to_string());
    }
    Some(format!("{}:{}", owner.uid(), owner.gid()))
}

/// The exec client's entry point: when the process was started as one (its first argument is
/// [`EXEC_HELPER_ARG`]), runs the program and returns the exit code to end with. A program
/// embedding fabro's library calls this first thing in `main`, as the `fabro` binary does.
pub fn exec_helper_main() -> Option<u8> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(EXEC_HELPER_ARG)) {
        return None;
    }
    let request =
        args.next().and_then(|json| serde_json::from_str::<ExecRequest>(&json.to_string_lossy()).ok());
    let argv: Vec<OsString> = args.collect();
    let Some(request) = request.filter(|_| !argv.is_empty()) else {
        eprintln!("fabro: {EXEC_HELPER_ARG} wants a request and a program");
        return Some(125);
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("fabro: cannot start the container client: {error}");
            return Some(125);
        }
    };
    Some(runtime.block_on(async move {
        match exec(&request, &argv).await {
            Ok(code) => code,
            Err(error) => {
                eprintln!("fabro: {error}");
                125
            }
        }
    }))
}

/// Makes sure the request's container runs, and returns its id.
async fn ensure_container(docker: &Docker, request: &ExecRequest) -> Result<String, ContainerError> {
    let name = request.container_name();
    let host = &request.host;
    let start_error = |detail: String| ContainerError::Start {
        image: request.spec.image.clone(),
        host: host.clone(),
        detail,
    };
    for _ in 0..3 {
        if let Ok(found) = docker.inspect_container(&name, None).await {
            let id = found.id.unwrap_or_else(|| name.clone());
            if found.state.and_then(|state| state.running) == Some(true) {
                return Ok(id);
            }
            match docker.start_container(&id, None).await {
                Ok(()) => return Ok(id),
                // Another client started it meanwhile: look again.
                Err(error) => {
                    tracing::debug!(%error, "start raced");
                    continue;
                }
            }
        }
        ensure_image(docker, host, &request.spec.image).await?;
        let options = bollard::query_parameters::CreateContainerOptionsBuilder::default().name(&name).build();
        match docker.create_container(Some(options), create_body(request)).await {
            Ok(_) => {}
            // Created by another client since the look above.
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => continue,
            Err(error) => return Err(start_error(error.to_string())),
        }
        if let Err(error) = docker.start_container(&name, None).await {
            return Err(start_error(error.to_string()));
        }
        if let Some(argv) = &request.post_create {
            if let Err(detail) = post_create(docker, &name, request, argv).await {
                let _ = docker
                    .remove_container(
                        &name,
                        Some(
                            bollard::query_parameters::RemoveContainerOptionsBuilder::default()
                                .force(true)
                                .build(),
                        ),
                    )
                    .await;
                return Err(start_error(detail));
            }
        }
    }
    let found =
        docker.inspect_container(&name, None).await.map_err(|error| start_error(error.to_string()))?;
    Ok(found.id.unwrap_or(name))
}

/// Runs a devcontainer's `postCreateCommand` in the new container, its output going to
/// `devcontainer-post-create.log` in the run directory.
async fn post_create(
    docker: &Docker,
    container: &str,
    request: &ExecRequest,
    argv: &[String],
) -> Result<(), String> {
    use std::io::Write;
    let options = bollard::exec::CreateExecOptions {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        env: Some(request.env.clone()),
        cmd: Some(argv.to_vec()),
        user: request.user.clone(),
        working_dir: Some(request.work_dir.display().to_string()),
        ..Default::default()
    };
    let created = docker.create_exec(container, options).await.map_err(|error| error.to_string())?;
    let started = docker.start_exec(&created.id, None).await.map_err(|error| error.to_string())?;
    let log_path = request.run_dir.as_ref().map(|dir| dir.join("devcontainer-post-create.log"));
    let mut log = log_path.as_ref().and_then(|path| std::fs::File::create(path).ok());
    if let bollard::exec::StartExecResults::Attached { mut output, .. } = started {
        while let Some(Ok(chunk)) = output.next().await {
            if let Some(log) = log.as_mut() {
                let _ = log.write_all(&chunk.into_bytes());
            }
        }
    }
    let code = exit_code(docker, &created.id).await;
    match code {
        Some(0) => Ok(()),
        code => Err(format!(
            "postCreateCommand {argv:?} exited with {}{}",
            code.map_or("no code".to_string(), |code| code.to_string()),
            log_path.map_or(String::new(), |path| format!("; see {}", path.display()))
        )),
    }
}

/// The container of `request`: a shell that waits, as long as the run, for programs to exec.
/// Starting it (and whatever `postCreateCommand` it has) happens before the first program.
fn create_body(request: &ExecRequest) -> bollard::models::ContainerCreateBody {
    let mut labels = HashMap::new();
    labels.insert(LABEL_SESSION.to_string(), request.session.clone());
    labels.insert(LABEL_IMAGE.to_string(), request.spec.image.clone());
    if let Some(run_dir) = &request.run_dir {
        labels.insert(LABEL_RUN_DIR.to_string(), run_dir.display().to_string());
    }
    let binds = request
        .mounts
        .iter()
        .map(|(path, writable)| format!("{0}:{0}:{1}", path.display(), if *writable { "rw" } else { "ro" }))
        .collect();
    let host_config = bollard::models::HostConfig {
        binds: Some(binds),
        // Writable for every user (a devcontainer's remoteUser too), whatever the image's /tmp is.
        mounts: Some(vec![bollard::models::Mount {
            target: Some("/tmp".to_string()),
            typ: Some(bollard::models::MountType::TMPFS),
            tmpfs_options: Some(bollard::models::MountTmpfsOptions {
                mode: Some(0o1777),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        network_mode: Some(if request.network { "bridge" } else { "none" }.to_string()),
        nano_cpus: request.spec.nano_cpus,
        memory: request.spec.memory,
        pids_limit: request.spec.pids,
        cap_drop: Some(vec!["ALL".to_string()]),
        security_opt: Some(vec!["no-new-privileges".to_string()]),
        ..Default::default()
    };
    bollard::models::ContainerCreateBody {
        image: Some(request.spec.image.clone()),
        entrypoint: Some(vec![
            "sh".to_string(),
            "-c".to_string(),
            "chmod 1777 /tmp 2>/dev/null; trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"
                .to_string(),
        ]),
        cmd: Some(Vec::new()),
        env: Some(request.env.clone()),
        // Only this idle shell is root (without capabilities): it makes /tmp everyone's, which
        // a tmpfs mode does not do on every service. Every program runs as `request.user`.
        user: Some("0:0".to_string()),
        working_dir: Some(request.work_dir.display().to_string()),
        labels: Some(labels),
        stop_timeout: Some(1),
        network_disabled: Some(!request.network),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// What runs the program in the container: it, then SIGTERM to what it left running (every other
/// process carrying its exec marker), unless `FABRO_KEEP_BACKGROUND` is set (`keep_background`).
/// The image needs a POSIX `sh`.
///
/// With stdin attached, it first reads one line the client sends (`FABRO_EXEC_SYNC`): Podman 4
/// loses the output of an exec with stdin whose program ends before its attach is connected
/// ("read unixpacket ... connection reset by peer"); a line that made it through proves it is.
const WRAPPER: &str = r#"if [ -n "$FABRO_EXEC_SYNC" ]; then IFS= read -r _ || exit 125; fi
unset FABRO_EXEC_SYNC
"$@"
status=$?
if [ -z "$FABRO_KEEP_BACKGROUND" ]; then
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" = "$$" ] && continue
    case "$(cat "$p/environ" 2>/dev/null)" in *"FABRO_EXEC=$FABRO_EXEC"*) kill -TERM "$pid" 2>/dev/null;; esac
  done
fi
exit $status"#;

/// Runs the program of `argv` in the request's container and returns its exit code.
async fn exec(request: &ExecRequest, argv: &[OsString]) -> Result<u8, ContainerError> {
    use tokio::io::AsyncWriteExt;
    let docker = connect(&request.host)?;
    let container = ensure_container(&docker, request).await?;
    give_writable_dirs(request);
    let marker = uuid::Uuid::now_v7().simple().to_string();
    let mut env: Vec<String> = std::env::vars_os()
        .filter_map(|(name, value)| {
            Some(format!("{}={}", name.into_string().ok()?, value.into_string().ok()?))
        })
        .collect();
    env.extend(request.env.iter().cloned());
    env.push(format!("FABRO_EXEC={marker}"));
    let stdin_attached = !stdin_is_null();
    if stdin_attached {
        env.push("FABRO_EXEC_SYNC=1".to_string());
    }
    let options = bollard::exec::CreateExecOptions {
        attach_stdin: Some(stdin_attached),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        env: Some(env),
        cmd: Some(
            ["sh", "-c", WRAPPER, "sh"]
                .into_iter()
                .map(str::to_string)
                .chain(argv.iter().map(|arg| arg.to_string_lossy().into_owned()))
                .collect(),
        ),
        user: request.user.clone(),
        working_dir: Some(request.work_dir.display().to_string()),
        ..Default::default()
    };
    let host = &request.host;
    let created = docker.create_exec(&container, options).await.map_err(|error| api_error(host, error))?;
    let started = docker.start_exec(&created.id, None).await.map_err(|error| api_error(host, error))?;
    let bollard::exec::StartExecResults::Attached { mut output, mut input } = started else {
        return Err(api_error(host, "the exec was not attached"));
    };
    if stdin_attached {
        tokio::spawn(async move {
            if input.write_all(b"\n").await.is_err() {
                return;
            }
            let _ = tokio::io::copy(&mut tokio::io::stdin(), &mut input).await;
            let _ = input.shutdown().await;
        });
    } else {
        drop(input);
    }
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    let mut terminate = signal(tokio::signal::unix::SignalKind::terminate());
    let mut interrupt = signal(tokio::signal::unix::SignalKind::interrupt());
    let mut hangup = signal(tokio::signal::unix::SignalKind::hangup());
    let mut poll = tokio::time::interval(EXEC_POLL);
    poll.tick().await;
    let mut ended_at = None;
    loop {
        tokio::select! {
            chunk = output.next() => match chunk {
                Some(Ok(bollard::container::LogOutput::StdErr { message })) => {
                    let _ = stderr.write_all(&message).await;
                    let _ = stderr.flush().await;
                }
                Some(Ok(log)) => {
                    let _ = stdout.write_all(&log.into_bytes()).await;
                    let _ = stdout.flush().await;
                }
                Some(Err(_)) | None => break,
            },
            _ = poll.tick() => {
                if ended_at.is_none() && !exec_running(&docker, &created.id).await {
                    ended_at = Some(tokio::time::Instant::now());
                } else if ended_at.is_some_and(|at| at.elapsed() >= EXEC_POLL) {
                    // The program ended and what it left in the background holds its output.
                    kill_marked(&docker, &container, request, &marker, "KILL").await;
                    break;
                }
            }
            _ = recv(&mut terminate) => return Ok(stop(&docker, &container, request, &marker, &mut output, 15).await),
            _ = recv(&mut interrupt) => return Ok(stop(&docker, &container, request, &marker, &mut output, 2).await),
            _ = recv(&mut hangup) => return Ok(stop(&docker, &container, request, &marker, &mut output, 1).await),
        }
    }
    match exit_code(&docker, &created.id).await {
        Some(code) => Ok(u8::try_from(code & 0xff).unwrap_or(125)),
        None => Err(api_error(host, "the program's output ended but the service has no exit code for it")),
    }
}

/// The exit code of an exec whose output ended: the output ends a moment before the service has
/// the code, so it is asked for up to a second.
async fn exit_code(docker: &Docker, exec_id: &str) -> Option<i64> {
    for _ in 0..100 {
        let inspected = docker.inspect_exec(exec_id).await.ok()?;
        if inspected.running != Some(true) {
            return inspected.exit_code;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Gives the stage directory to the container's user when fabro runs as root and the work
/// directory is another user's, so that the stage can write its directory (`status.json`).
fn give_writable_dirs(request: &ExecRequest) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let Some((uid, gid)) = request.user.as_deref().and_then(|user| {
        let (uid, gid) = user.split_once(':')?;
        Some((uid.parse::<u32>().ok()?, gid.parse::<u32>().ok()?))
    }) else {
        return;
    };
    if uid == 0 {
        return;
    }
    for dir in request.writable.iter().filter(|dir| **dir != request.work_dir) {
        if crate::regular_file::is_real_dir(dir) {
            let _ = std::os::unix::fs::lchown(dir, Some(uid), Some(gid));
        }
    }
}

/// Stops the program after the client got `signal`: SIGTERM to everything it started, SIGKILL
/// after [`TERM_GRACE`]; returns the exit code of a process killed by `signal`.
async fn stop(
    docker: &Docker,
    container: &str,
    request: &ExecRequest,
    marker: &str,
    output: &mut (impl futures::Stream + Unpin),
    signal: u8,
) -> u8 {
    kill_marked(docker, container, request, marker, "TERM").await;
    let drained = tokio::time::timeout(TERM_GRACE, async { while output.next().await.is_some() {} }).await;
    if drained.is_err() {
        kill_marked(docker, container, request, marker, "KILL").await;
    }
    128 + signal
}

/// Sends `signal` to every process in the container whose environment holds `marker`: the
/// program and everything it started that kept its environment.
async fn kill_marked(docker: &Docker, container: &str, request: &ExecRequest, marker: &str, signal: &str) {
    let script = format!(
        "for p in /proc/[0-9]*; do case \"$(cat \"$p/environ\" 2>/dev/null)\" in *FABRO_EXEC={marker}*) \
         kill -{signal} \"${{p#/proc/}}\" 2>/dev/null;; esac; done; exit 0"
    );
    let options = bollard::exec::CreateExecOptions {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(vec!["sh".to_string(), "-c".to_string(), script]),
        user: request.user.clone(),
        ..Default::default()
    };
    let Ok(created) = docker.create_exec(container, options).await else { return };
    if let Ok(bollard::exec::StartExecResults::Attached { mut output, .. }) =
        docker.start_exec(&created.id, None).await
    {
        while output.next().await.is_some() {}
    }
}

async fn exec_running(docker: &Docker, exec_id: &str) -> bool {
    docker.inspect_exec(exec_id).await.map_or(true, |inspected| inspected.running == Some(true))
}

fn signal(kind: tokio::signal::unix::SignalKind) -> Option<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(kind).ok()
}

async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// Whether the client's stdin is `/dev/null` (a command stage's), which the program then gets
/// without a stream to relay.
fn stdin_is_null() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(null) = std::fs::metadata("/dev/null") else { return false };
    let Ok(stdin) = std::fs::metadata("/proc/self/fd/0") else { return true };
    stdin.rdev() == null.rdev() && stdin.dev() == null.dev()
}

/// The container this fabro process runs the programs of a stage confined by `confinement` in,
/// if it has started one: found by its labels (this process, the run directory, the image).
pub async fn of_stage(confinement: &super::Confinement) -> Option<crate::outcome::ContainerRecord> {
    let spec = confinement.container.as_ref()?;
    let run_dir = confinement.read_only.first()?;
    let host = host_address(confinement.kind)?;
    let docker = connect(&host).ok()?;
    let filters = HashMap::from([(
        "label".to_string(),
        vec![
            format!("{LABEL_SESSION}={}", *SESSION),
            format!("{LABEL_RUN_DIR}={}", run_dir.display()),
            format!("{LABEL_IMAGE}={}", spec.image),
        ],
    )]);
    let options =
        bollard::query_parameters::ListContainersOptionsBuilder::default().filters(&filters).build();
    let found = docker.list_containers(Some(options)).await.ok()?;
    let container = found.into_iter().next()?;
    Some(crate::outcome::ContainerRecord {
        id: container.id?,
        image: spec.image.clone(),
        image_digest: container.image_id.unwrap_or_default(),
    })
}

/// An image fabro built for a devcontainer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    pub image: String,
    pub duration: Duration,
}

/// One build at a time in this process: parallel stages wanting the same image wait for the first.
static BUILDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Builds the image of `dev` (a `build.dockerfile` devcontainer) on the service of `kind`, its
/// output going to `log`, unless the service has it already (the tag is the Dockerfile's digest):
/// then `None`.
pub async fn build_devcontainer_image(
    kind: SandboxKind,
    dev: &super::devcontainer::Devcontainer,
    log: &Path,
) -> Result<Option<Built>, ContainerError> {
    use std::io::Write;
    let super::devcontainer::DevImage::Built { dockerfile, context, tag } = &dev.image else {
        return Ok(None);
    };
    let host = host_address(kind).unwrap_or_default();
    let docker = connect(&host)?;
    let _one = BUILDING.lock().await;
    if docker.inspect_image(tag).await.is_ok() {
        return Ok(None);
    }
    let failed = |detail: String| ContainerError::Build { image: tag.clone(), detail };
    let started = std::time::Instant::now();
    let (context, dockerfile) = match (std::fs::canonicalize(context), std::fs::canonicalize(dockerfile)) {
        (Ok(context), Ok(dockerfile)) => (context, dockerfile),
        _ => return Err(failed(format!("{} or {} does not exist", context.display(), dockerfile.display()))),
    };
    let Ok(relative) = dockerfile.strip_prefix(&context) else {
        return Err(failed(format!(
            "the Dockerfile {} lies outside the build context {}",
            dockerfile.display(),
            context.display()
        )));
    };
    let tar = tokio::process::Command::new("tar")
        .arg("-C")
        .arg(&context)
        .args(["-cf", "-", "."])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|error| failed(format!("cannot run tar on the build context: {error}")))?;
    if !tar.status.success() {
        return Err(failed(format!(
            "tar of the build context failed: {}",
            String::from_utf8_lossy(&tar.stderr).trim()
        )));
    }
    let mut file = std::fs::File::create(log)
        .map_err(|error| failed(format!("cannot write {}: {error}", log.display())))?;
    let options = bollard::query_parameters::BuildImageOptionsBuilder::default()
        .dockerfile(&relative.display().to_string())
        .t(tag)
        .rm(true)
        .build();
    let mut build = docker.build_image(options, None, Some(bollard::body_full(tar.stdout.into())));
    let mut last_error = None;
    while let Some(step) = build.next().await {
        match step {
            Ok(info) => {
                if let Some(line) = info.stream.as_deref().or(info.status.as_deref()) {
                    let _ = file.write_all(line.as_bytes());
                }
                if let Some(detail) = info.error_detail.and_then(|detail| detail.message) {
                    let _ = writeln!(file, "{detail}");
                    last_error = Some(detail);
                }
            }
            Err(error) => {
                let _ = writeln!(file, "{error}");
                last_error = Some(error.to_string());
            }
        }
    }
    if docker.inspect_image(tag).await.is_err() {
        let detail = last_error.unwrap_or_else(|| "the service made no image".into());
        return Err(failed(format!("{detail}; see {}", log.display())));
    }
    Ok(Some(Built { image: tag.clone(), duration: started.elapsed() }))
}

/// A container fabro removed, and what it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub id: String,
    pub image: String,
}

/// Removes every container this fabro process started (the run's end: success, failure, a
/// pause, Ctrl-C). Returns them.
pub fn remove_session_containers() -> Vec<Removed> {
    let hosts: Vec<String> =
        HOSTS_USED.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect();
    hosts.iter().flat_map(|host| remove_labelled(host, LABEL_SESSION, &SESSION, None)).collect()
}

/// The containers this fabro process started and still runs (for `--preserve-sandbox`).
pub fn session_containers() -> Vec<Removed> {
    let hosts: Vec<String> =
        HOSTS_USED.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect();
    hosts
        .iter()
        .flat_map(|host| {
            block_on(list_labelled(host.clone(), LABEL_SESSION, SESSION.clone())).unwrap_or_default()
        })
        .collect()
}

/// Removes the containers a killed fabro left for the run in `run_dir` (or a run below it), on
/// the daemon of `kind`. Returns them.
pub fn remove_run_containers(kind: SandboxKind, run_dir: &Path) -> Vec<Removed> {
    let Some(host) = host_address(kind) else { return Vec::new() };
    let run_dir = std::path::absolute(run_dir).unwrap_or_else(|_| run_dir.to_path_buf());
    remove_labelled(&host, LABEL_RUN_DIR, "", Some(&run_dir))
}

/// Removes the containers on `host` labelled `key=value`, or with `key` naming `below` or a
/// directory under it.
fn remove_labelled(host: &str, key: &'static str, value: &str, below: Option<&Path>) -> Vec<Removed> {
    let host = host.to_string();
    let value = value.to_string();
    let below = below.map(Path::to_path_buf);
    block_on(async move {
        let Ok(docker) = connect(&host) else { return Vec::new() };
        let filter = if below.is_some() { key.to_string() } else { format!("{key}={value}") };
        let found = list(&docker, &filter, true).await;
        let mut removed = Vec::new();
        for container in found {
            let labels = container.labels.unwrap_or_default();
            if let Some(below) = &below {
                let Some(dir) = labels.get(key) else { continue };
                if !Path::new(dir).starts_with(below) {
                    continue;
                }
            }
            let Some(id) = container.id else { continue };
            let options =
                bollard::query_parameters::RemoveContainerOptionsBuilder::default().force(true).build();
            let _ = docker
                .kill_container(
                    &id,
                    Some(
                        bollard::query_parameters::KillContainerOptionsBuilder::default()
                            .signal("KILL")
                            .build(),
                    ),
                )
                .await;
            if docker.remove_container(&id, Some(options)).await.is_ok() {
                removed.push(Removed { id, image: labels.get(LABEL_IMAGE).cloned().unwrap_or_default() });
            }
        }
        removed
    })
    .unwrap_or_default()
}

async fn list_labelled(host: String, key: &'static str, value: String) -> Vec<Removed> {
    let Ok(docker) = connect(&host) else { return Vec::new() };
    list(&docker, &format!("{key}={value}"), false)
        .await
        .into_iter()
        .filter_map(|container| {
            let image = container
                .labels
                .as_ref()
                .and_then(|labels| labels.get(LABEL_IMAGE).cloned())
                .unwrap_or_default();
            Some(Removed { id: container.id?, image })
        })
        .collect()
}

/// The containers labelled `filter` (`key` or `key=value`), stopped ones too when `all`. A
/// container in a state the client does not know (Podman's `stopped`, while another is being
/// removed) fails the whole listing: it is asked again, and at last for the running ones only,
/// the ones that matter.
async fn list(docker: &Docker, filter: &str, all: bool) -> Vec<bollard::models::ContainerSummary> {
    let filters = HashMap::from([("label".to_string(), vec![filter.to_string()])]);
    let attempts = if all { 5 } else { 0 };
    for _ in 0..attempts {
        let options = bollard::query_parameters::ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        match docker.list_containers(Some(options)).await {
            Ok(found) => return found,
            Err(error) => tracing::debug!(%error, "listing containers"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let options =
        bollard::query_parameters::ListContainersOptionsBuilder::default().filters(&filters).build();
    docker.list_containers(Some(options)).await.unwrap_or_else(|error| {
        tracing::warn!(%error, "containers not listed");
        Vec::new()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_directory_is_shown_writable_through_the_run_directorys_stages() {
        let temp = tempfile::tempdir().unwrap();
        let work = temp.path().join("work");
        let run = work.join(".fabro/runs/r1");
        let stage = run.join("stages/build/1");
        std::fs::create_dir_all(&stage).unwrap();
        let setup = ExecSetup {
            kind: SandboxKind::Podman,
            spec: None,
            network: false,
            binds: &[],
            pass_env: &[],
            work_dir: &work,
            writable: &[&stage],
            protected: vec![run.clone(), work.join(".fabro")],
        };
        assert_eq!(
            mounts(&work, &setup),
            [
                (work.clone(), true),
                (work.join(".fabro"), false),
                (run.clone(), false),
                (run.join("stages"), true)
            ]
        );
    }

    #[test]
    fn the_container_name_follows_what_is_fixed_at_creation() {
        let request = ExecRequest {
            host: "unix:///run/podman/podman.sock".into(),
            session: "s".into(),
            spec: ContainerSpec {
                image: "debian:12".into(),
                devcontainer: None,
                nano_cpus: None,
                memory: None,
                pids: None,
            },
            network: false,
            run_dir: None,
            work_dir: "/w".into(),
            mounts: vec![("/w".into(), true)],
            user: Some("1000:1000".into()),
            writable: Vec::new(),
            env: Vec::new(),
            post_create: None,
        };
        let networked = ExecRequest { network: true, ..request.clone() };
        assert_ne!(request.container_name(), networked.container_name());
        assert_eq!(request.container_name(), request.clone().container_name());
        assert!(request.container_name().starts_with("fabro-"));
    }
}
