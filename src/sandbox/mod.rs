//! Confining what stages run: command stages, the agent's `shell` tool and CLI agents.
//!
//! A [`Sandbox`] turns "run this program in this directory" into the command that runs it
//! confined. Two exist: [`SandboxKind::None`] runs it as it is, [`SandboxKind::Bwrap`] runs it
//! under bubblewrap (`bwrap`): the file system read-only except the work directory, the stage
//! directory and a private `/tmp`; the run directory and the work directory's `.fabro/` (runs,
//! memory, artifacts) read-only even where they lie inside the work directory, so a stage cannot
//! rewrite the records fabro trusts; the user's home hidden (an empty directory in its place,
//! the work directory shown again when it lies inside); its own PID, IPC and UTS namespaces with
//! a fresh `/proc` (no other process is visible, fabro's environment included), a new session
//! (no terminal injection), no capabilities, and killed with fabro; no network unless the stage
//! asks for it; an environment holding only basic variables, the ones the stage lets through and
//! the `FABRO_*` stage variables, so API keys stay outside. [`SandboxKind::Podman`] and
//! [`SandboxKind::Docker`] run it in an OCI container of the run ([`container`]). Handlers only
//! ever ask a [`Confinement`] for a command.
//!
//! Which sandbox a stage uses: its `sandbox` attribute, else `fabro run --sandbox`, else the
//! graph's `default_sandbox`, else the config file's `sandbox`, else none.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::graph::settings::{Bind, SandboxKind, SandboxSettings};
use crate::graph::{Node, Workflow};

pub mod container;
pub mod devcontainer;

pub use container::{ContainerError, ContainerSpec};

/// The implementation of `kind`.
fn implementation(kind: SandboxKind) -> &'static dyn Sandbox {
    match kind {
        SandboxKind::None => &Unconfined,
        SandboxKind::Bwrap => &Bubblewrap,
        SandboxKind::Podman | SandboxKind::Docker => &Container,
    }
}

/// How one stage's processes run: the sandbox and what it lets in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Confinement {
    pub kind: SandboxKind,
    /// `sandbox_network=true`: the network is there as outside.
    pub network: bool,
    /// `sandbox_paths` of the node, then of the graph.
    pub binds: Vec<Bind>,
    /// `sandbox_env`: names of environment variables let through.
    pub pass_env: Vec<String>,
    /// Directories shown read-only even where they lie inside a writable one: the run directory.
    pub read_only: Vec<PathBuf>,
    /// The container sandboxes' image and limits (the node's, else the graph's); `None` for the
    /// others, and for a container stage without an image ([`check_workflow`] refuses those).
    pub container: Option<ContainerSpec>,
}

/// Environment variables every confined process keeps.
const BASIC_ENV: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ"];

impl Confinement {
    /// The confinement of `node`: its settings, else `flag` (`--sandbox`), else the graph's
    /// defaults, else `user_default` (the config file). Unparsable values were refused by
    /// [`check_workflow`]; here they fall back to the next source.
    pub fn of(
        node: &Node,
        workflow: &Workflow,
        flag: Option<SandboxKind>,
        user_default: Option<SandboxKind>,
    ) -> Confinement {
        let own = &node.settings.stage.sandbox;
        let graph = &workflow.settings().sandbox;
        let kind = own.kind.or(flag).or(graph.kind).or(user_default).unwrap_or_default();
        Confinement {
            kind,
            network: own.network,
            binds: [own, graph].into_iter().flat_map(SandboxSettings::binds).cloned().collect(),
            pass_env: [own, graph].into_iter().flat_map(|settings| settings.env.iter().cloned()).collect(),
            read_only: Vec::new(),
            container: kind.is_container().then(|| container_spec(own, graph)).flatten(),
        }
    }

    /// This confinement with `run_dir` read-only inside the sandbox (but the stage directories
    /// given as writable to [`Confinement::command`]).
    pub fn protecting(mut self, run_dir: &Path) -> Confinement {
        self.read_only.push(std::path::absolute(run_dir).unwrap_or_else(|_| run_dir.to_path_buf()));
        self
    }

    /// The command that runs `program args` in `work_dir` under this confinement. `writable` are
    /// the directories the stage writes besides the work directory (its stage directory),
    /// `readable` those it reads (the run directory). The run's secret variables
    /// ([`crate::secrets`]) are removed from its environment, but those `sandbox_env` names.
    pub fn command(
        &self,
        program: &OsStr,
        args: &[&OsStr],
        work_dir: &Path,
        writable: &[&Path],
        readable: &[&Path],
    ) -> tokio::process::Command {
        let setup = Setup { work_dir, writable, readable, confinement: self };
        let mut command = implementation(self.kind).command(program, args, &setup);
        crate::secrets::strip_env(&mut command, &self.pass_env);
        command
    }
}

/// The container of a stage with `own` settings in a graph with `graph` settings: each value the
/// node's, else the graph's; `None` without an image. Unreadable limits were refused by
/// [`check_workflow`] and are left out.
fn container_spec(own: &SandboxSettings, graph: &SandboxSettings) -> Option<ContainerSpec> {
    let (own, graph) = (&own.container, &graph.container);
    let pick = |own: &Option<Result<u64, String>>, graph: &Option<Result<u64, String>>| {
        own.clone().or_else(|| graph.clone()).and_then(Result::ok).and_then(|value| i64::try_from(value).ok())
    };
    // The node's own image or devcontainer, else the graph's.
    let (image, devcontainer) = match (&own.image, &own.devcontainer, &graph.image, &graph.devcontainer) {
        (Some(image), ..) => (image.clone(), None),
        (None, Some(dev), ..) => (String::new(), Some(dev.clone())),
        (None, None, Some(image), _) => (image.clone(), None),
        (None, None, None, Some(dev)) => (String::new(), Some(dev.clone())),
        (None, None, None, None) => return None,
    };
    Some(ContainerSpec {
        image,
        devcontainer,
        nano_cpus: own
            .cpus
            .clone()
            .or_else(|| graph.cpus.clone())
            .and_then(Result::ok)
            .map(|cpus| (cpus * 1e9).round() as i64),
        memory: pick(&own.memory, &graph.memory),
        pids: pick(&own.pids, &graph.pids),
    })
}

/// What a [`Sandbox`] needs to build a command.
pub struct Setup<'a> {
    pub work_dir: &'a Path,
    pub writable: &'a [&'a Path],
    pub readable: &'a [&'a Path],
    pub confinement: &'a Confinement,
}

/// A way of running a stage's program.
pub trait Sandbox: Send + Sync {
    fn name(&self) -> &'static str;
    /// The command that runs `program args` in `setup.work_dir`.
    fn command(&self, program: &OsStr, args: &[&OsStr], setup: &Setup<'_>) -> tokio::process::Command;
}

/// No confinement.
struct Unconfined;

impl Sandbox for Unconfined {
    fn name(&self) -> &'static str {
        "none"
    }

    fn command(&self, program: &OsStr, args: &[&OsStr], setup: &Setup<'_>) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(program);
        command.args(args).current_dir(setup.work_dir);
        command
    }
}

/// bubblewrap.
struct Bubblewrap;

impl Sandbox for Bubblewrap {
    fn name(&self) -> &'static str {
        "bwrap"
    }

    fn command(&self, program: &OsStr, args: &[&OsStr], setup: &Setup<'_>) -> tokio::process::Command {
        let confinement = setup.confinement;
        let mut command = tokio::process::Command::new(bwrap_program());
        command.args(BWRAP_ISOLATION);
        if !confinement.network {
            command.arg("--unshare-net");
        }
        command.args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]);
        // The home directory is hidden: an empty one stands in its place.
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|home| home.is_dir() && home != Path::new("/"));
        if let Some(home) = &home {
            command.arg("--tmpfs").arg(home);
        }
        // Mounts stack: each one below hides what an earlier one showed at the same place.
        for path in setup.readable {
            command.arg("--ro-bind-try").arg(path).arg(path);
        }
        for bind in &confinement.binds {
            command.arg(if bind.writable { "--bind" } else { "--ro-bind" }).arg(&bind.path).arg(&bind.path);
        }
        // What fabro trusts stays read-only though it lies in a writable directory: the run
        // directory (`.fabro/runs/...` by default) and the work directory's `.fabro/` with the
        // project's memory. Writable directories inside them (a worktree run's work directory,
        // the stage directory) are shown writable again on top.
        let protected = protected_dirs(setup);
        let inside_protected = |path: &Path| protected.iter().any(|dir| path.starts_with(dir));
        let writable: Vec<&Path> =
            std::iter::once(setup.work_dir).chain(setup.writable.iter().copied()).collect();
        for path in writable.iter().filter(|path| !inside_protected(path)) {
            command.arg("--bind").arg(path).arg(path);
        }
        for path in &protected {
            command.arg("--ro-bind-try").arg(path).arg(path);
        }
        let rebound: Vec<&&Path> = writable.iter().filter(|path| inside_protected(path)).collect();
        for path in &rebound {
            command.arg("--bind").arg(path).arg(path);
        }
        // And what is protected inside those (a worktree's own `.fabro/`) is read-only again.
        for path in
            protected.iter().filter(|dir| rebound.iter().any(|outer| dir.starts_with(outer) && dir != outer))
        {
            command.arg("--ro-bind-try").arg(path).arg(path);
        }
        command.arg("--chdir").arg(setup.work_dir).arg("--").arg(program).args(args);
        command.current_dir(setup.work_dir).env_clear();
        for name in BASIC_ENV.iter().copied().chain(confinement.pass_env.iter().map(String::as_str)) {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
    }
}

/// An OCI container of the run ([`container`]).
struct Container;

impl Sandbox for Container {
    fn name(&self) -> &'static str {
        "container"
    }

    fn command(&self, program: &OsStr, args: &[&OsStr], setup: &Setup<'_>) -> tokio::process::Command {
        let confinement = setup.confinement;
        container::command(
            program,
            args,
            &container::ExecSetup {
                kind: confinement.kind,
                spec: confinement.container.as_ref(),
                network: confinement.network,
                binds: &confinement.binds,
                pass_env: &confinement.pass_env,
                work_dir: setup.work_dir,
                writable: setup.writable,
                protected: protected_dirs(setup),
            },
        )
    }
}

/// bwrap by its full path where PATH has it: the environment is cleared below, and a program then
/// left to a PATH search would have std fork fabro to start it ([`crate::process_group`]).
fn bwrap_program() -> PathBuf {
    crate::process_group::find_program("bwrap".as_ref()).unwrap_or_else(|| PathBuf::from("bwrap"))
}

/// What bubblewrap separates from the host besides the file system: the stage sees no other
/// process (its own PID namespace and `/proc`, so not fabro's environment nor `/proc/<pid>/root`
/// of a host process), shares no IPC or host name, cannot push input into fabro's terminal (a new
/// session), holds no capability even when fabro runs as root, and dies with fabro: the outer
/// bwrap leads the stage's process group, which dies with fabro ([`crate::process_group`]), and
/// `--die-with-parent` kills the sandbox's first process when the outer bwrap dies (everything in
/// the PID namespace ends with it). The flag also ties the outer bwrap to the thread that spawned
/// it, a thread of fabro's runtime, which lasts as long as the run.
const BWRAP_ISOLATION: &[&str] = &[
    "--die-with-parent",
    "--new-session",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--cap-drop",
    "ALL",
];

/// The directories shown read-only inside the writable work directory: the run directory and the
/// work directory's `.fabro/` (when it is a directory of its own, not a link a stage planted).
fn protected_dirs(setup: &Setup<'_>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = setup.confinement.read_only.clone();
    // Made now if missing, so that the stage cannot make it a link to where fabro would then
    // write its memory or artifacts.
    let dot_fabro = setup.work_dir.join(".fabro");
    if !dot_fabro.exists() {
        let _ = std::fs::create_dir(&dot_fabro);
    }
    if crate::regular_file::is_real_dir(&dot_fabro) {
        dirs.push(dot_fabro);
    }
    dirs
}

/// Why stages cannot run in their sandbox on this machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "stage(s) {stages} run in the bwrap sandbox, but `bwrap` is not installed; install bubblewrap \
         (Debian/Ubuntu: `apt-get install bubblewrap`) or run without the sandbox (`--sandbox none`, or \
         sandbox=\"none\" on the stage)"
    )]
    Missing { stages: String },
    #[error(
        "stage(s) {stages} run in the bwrap sandbox, but bwrap cannot create its namespaces on this machine \
         ({detail}); allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1) or run \
         without the sandbox (`--sandbox none`)"
    )]
    Unusable { stages: String, detail: String },
    #[error("stage `{node}`: {attribute}: {message}")]
    Attribute { node: String, attribute: &'static str, message: String },
    #[error(transparent)]
    Container(#[from] ContainerError),
    #[error(transparent)]
    Devcontainer(#[from] devcontainer::DevcontainerError),
}

/// Checks, before a run starts, the sandbox settings of every stage that runs a program, that
/// bwrap works here when any of them uses it, and that the container service answers and has
/// the images when any runs in a container.
///
/// `work_dir` is where the run works: a `devcontainer` is read from there (once; see
/// [`devcontainer`]). An image it builds is built when the first stage needs it.
pub fn check_workflow(
    workflow: &Workflow,
    flag: Option<SandboxKind>,
    user_default: Option<SandboxKind>,
    work_dir: &Path,
) -> Result<(), SandboxError> {
    let mut confined = Vec::new();
    let mut containers: std::collections::BTreeMap<
        SandboxKind,
        (Vec<String>, std::collections::BTreeSet<String>),
    > = Default::default();
    for node in workflow.nodes() {
        let sources =
            [(node.id.as_str(), &node.settings.stage.sandbox), ("(graph)", &workflow.settings().sandbox)];
        for (owner, settings) in sources {
            let invalid = |message: String| SandboxError::Attribute {
                node: owner.to_string(),
                attribute: "sandbox_paths",
                message,
            };
            let binds = settings.paths.as_ref().map_err(|message| invalid(message.clone()))?;
            if let Some(missing) = binds.iter().find(|bind| !bind.path.exists()) {
                return Err(invalid(format!("{} does not exist", missing.path.display())));
            }
            if let Some((attribute, message)) = settings.container.invalid() {
                return Err(SandboxError::Attribute {
                    node: owner.to_string(),
                    attribute,
                    message: message.to_string(),
                });
            }
        }
        if !runs_programs(node) {
            continue;
        }
        let confinement = Confinement::of(node, workflow, flag, user_default);
        match confinement.kind {
            SandboxKind::Bwrap => confined.push(format!("`{}`", node.id)),
            kind if kind.is_container() => {
                let Some(spec) = confinement.container else {
                    return Err(ContainerError::NoImage { node: node.id.clone(), kind: kind.as_str() }.into());
                };
                let (stages, images) = containers.entry(kind).or_default();
                stages.push(format!("`{}`", node.id));
                match &spec.devcontainer {
                    None => {
                        images.insert(spec.image);
                    }
                    Some(written) => match devcontainer::load(work_dir, written)?.image {
                        devcontainer::DevImage::Named(image) => {
                            images.insert(image);
                        }
                        devcontainer::DevImage::Built { .. } => {}
                    },
                }
            }
            _ => {}
        }
    }
    for (kind, (stages, images)) in &containers {
        container::check(*kind, &stages.join(", "), images)?;
    }
    if confined.is_empty() {
        return Ok(());
    }
    let stages = confined.join(", ");
    let probe = std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--unshare-net", "--dev", "/dev", "--proc", "/proc", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    match probe {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Err(SandboxError::Missing { stages }),
        Err(error) => Err(SandboxError::Unusable { stages, detail: error.to_string() }),
        Ok(output) if !output.status.success() => Err(SandboxError::Unusable {
            stages,
            detail: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        }),
        Ok(_) => Ok(()),
    }
}

/// The container sandboxes that stages of `workflow` run programs in.
pub fn container_kinds(
    workflow: &Workflow,
    flag: Option<SandboxKind>,
    user_default: Option<SandboxKind>,
) -> std::collections::BTreeSet<SandboxKind> {
    workflow
        .nodes()
        .filter(|node| runs_programs(node))
        .map(|node| Confinement::of(node, workflow, flag, user_default).kind)
        .filter(|kind| kind.is_container())
        .collect()
}

/// Stages whose processes a sandbox confines: commands and LLM stages (their shell tool or CLI
/// agent).
pub fn runs_programs(node: &Node) -> bool {
    use crate::graph::HandlerType;
    matches!(node.handler_type(), HandlerType::Command | HandlerType::Agent | HandlerType::Prompt)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `path` ends up writable in `command`: the last bind at or above it decides (a bind
    /// shows the host's directory, hiding the mounts made below it before).
    fn writable_in(command: &tokio::process::Command, path: &Path) -> bool {
        let args: Vec<String> =
            command.as_std().get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let mut writable = false;
        for window in args.windows(3) {
            let mode = match window[0].as_str() {
                "--bind" => true,
                "--ro-bind" | "--ro-bind-try" => false,
                _ => continue,
            };
            // A later mount replaces what earlier ones showed at and below its target.
            if path.starts_with(&window[2]) {
                writable = mode;
            }
        }
        writable
    }

    #[test]
    fn the_run_directory_and_dot_fabro_stay_read_only_under_every_writable_bind() {
        let temp = tempfile::tempdir().unwrap();
        let work = temp.path().join("work");
        let run = work.join(".fabro/runs/r1");
        let stage = run.join("stages/build/1");
        std::fs::create_dir_all(&stage).unwrap();
        let confinement = Confinement { kind: SandboxKind::Bwrap, ..Confinement::default() }.protecting(&run);
        // A command stage: the stage directory writable inside the protected run directory.
        let command = confinement.command("sh".as_ref(), &[], &work, &[&stage], &[&run]);
        assert!(writable_in(&command, &work.join("src")));
        assert!(!writable_in(&command, &work.join(".fabro/memory")));
        assert!(!writable_in(&command, &run.join("journal.jsonl")));
        assert!(writable_in(&command, &stage.join("status.json")));
        // An MCP server: the work directory itself given as writable.
        let command = confinement.command("server".as_ref(), &[], &work, &[&work], &[]);
        assert!(!writable_in(&command, &work.join(".fabro/memory")));
        assert!(!writable_in(&command, &run.join("checkpoint.json")));
        // A worktree run: the work directory inside the run directory, with a `.fabro` of its own.
        let worktree = run.join("worktree");
        std::fs::create_dir_all(worktree.join(".fabro")).unwrap();
        let command = confinement.command("sh".as_ref(), &[], &worktree, &[&stage], &[&run]);
        assert!(writable_in(&command, &worktree.join("src/lib.rs")));
        assert!(!writable_in(&command, &worktree.join(".fabro/memory")));
        assert!(!writable_in(&command, &run.join("journal.jsonl")));
        assert!(writable_in(&command, &stage.join("stdout.log")));
    }

    #[test]
    fn bwrap_is_named_by_its_full_path_so_that_fabro_is_not_forked_to_start_it() {
        let Some(bwrap) = crate::process_group::find_program("bwrap".as_ref()) else { return };
        let confinement = Confinement { kind: SandboxKind::Bwrap, ..Confinement::default() };
        let temp = tempfile::tempdir().unwrap();
        let command = confinement.command("sh".as_ref(), &[], temp.path(), &[], &[]);
        assert_eq!(command.as_std().get_program(), bwrap.as_os_str());
    }

    #[test]
    fn each_kind_has_its_implementation() {
        assert_eq!(implementation(SandboxKind::Bwrap).name(), "bwrap");
    }
}
