//! Sandbox settings: which sandbox a stage's programs run in (`sandbox` on a node,
//! `default_sandbox` on the graph), what it shows of the host (`sandbox_paths`), which
//! environment variables it lets through (`sandbox_env`), whether it has a network
//! (`sandbox_network`), and for the container sandboxes the image and limits (`image`,
//! `container_cpus`, `container_memory`, `container_pids`). [`crate::sandbox`] turns them into
//! confined commands.

use std::path::PathBuf;

use crate::graph::Attributes;

/// The sandboxes there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum SandboxKind {
    /// Stages run with the user's whole account.
    #[default]
    None,
    /// Stages run under bubblewrap.
    Bwrap,
    /// Stages run in an OCI container, through Podman's Docker-compatible API.
    Podman,
    /// Stages run in an OCI container, through the Docker API.
    Docker,
}

impl SandboxKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxKind::None => "none",
            SandboxKind::Bwrap => "bwrap",
            SandboxKind::Podman => "podman",
            SandboxKind::Docker => "docker",
        }
    }

    /// `none`, `bwrap`, `podman` or `docker`.
    pub fn parse(text: &str) -> Result<SandboxKind, String> {
        match text.trim() {
            "none" => Ok(SandboxKind::None),
            "bwrap" => Ok(SandboxKind::Bwrap),
            "podman" => Ok(SandboxKind::Podman),
            "docker" => Ok(SandboxKind::Docker),
            other => Err(format!("`{other}` is not a sandbox; use none, bwrap, podman or docker")),
        }
    }

    /// Whether stages run in a container (`podman`, `docker`).
    pub fn is_container(self) -> bool {
        matches!(self, SandboxKind::Podman | SandboxKind::Docker)
    }
}

/// What a container sandbox is made of (`image`, `container_cpus`, `container_memory`,
/// `container_pids`); each unset here is left to the graph.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerSettings {
    /// `image`: the image stages' containers start from.
    pub image: Option<String>,
    /// `container_cpus`: how many CPUs (fractions allowed), or why the value is not one.
    pub cpus: Option<Result<f64, String>>,
    /// `container_memory`: bytes (`512m`, `2g`), or why the value is not a size.
    pub memory: Option<Result<u64, String>>,
    /// `container_pids`: at most this many processes at once.
    pub pids: Option<Result<u64, String>>,
    /// `devcontainer`: `true`, or the path of a `devcontainer.json` (or of its directory),
    /// relative to the work directory; `false` and unset are `None`.
    pub devcontainer: Option<String>,
}

impl ContainerSettings {
    fn parse(attributes: &Attributes) -> ContainerSettings {
        ContainerSettings {
            image: attributes
                .text("image")
                .map(str::trim)
                .filter(|image| !image.is_empty())
                .map(str::to_string),
            cpus: attributes.text("container_cpus").map(parse_cpus),
            memory: attributes.text("container_memory").map(parse_memory),
            pids: attributes.integer("container_pids").map(|pids| match u64::try_from(pids) {
                Ok(pids) if pids > 0 => Ok(pids),
                _ => Err(format!("`{pids}` is not a number of processes; use 1 or more")),
            }),
            devcontainer: attributes
                .text("devcontainer")
                .map(str::trim)
                .filter(|text| !text.is_empty() && *text != "false")
                .map(str::to_string),
        }
    }

    /// The first value that cannot be read, with its attribute's name.
    pub fn invalid(&self) -> Option<(&'static str, &str)> {
        fn error<'a, T>(
            name: &'static str,
            value: &'a Option<Result<T, String>>,
        ) -> Option<(&'static str, &'a str)> {
            value.as_ref().and_then(|value| value.as_ref().err()).map(|message| (name, message.as_str()))
        }
        error("container_cpus", &self.cpus)
            .or_else(|| error("container_memory", &self.memory))
            .or_else(|| error("container_pids", &self.pids))
    }
}

/// `2`, `0.5`: a positive number of CPUs.
fn parse_cpus(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(cpus) if cpus.is_finite() && cpus > 0.0 && cpus <= 4096.0 => Ok(cpus),
        _ => Err(format!("`{text}` is not a number of CPUs; use e.g. 2 or 0.5")),
    }
}

/// `1073741824`, `512k`, `512m`, `2g` (powers of 1024, as `docker run --memory` reads them).
pub fn parse_memory(text: &str) -> Result<u64, String> {
    let trimmed = text.trim().to_ascii_lowercase();
    let trimmed = trimmed.strip_suffix('b').unwrap_or(&trimmed);
    let (digits, unit) = match trimmed.char_indices().last() {
        Some((at, 'k')) => (&trimmed[..at], 1u64 << 10),
        Some((at, 'm')) => (&trimmed[..at], 1 << 20),
        Some((at, 'g')) => (&trimmed[..at], 1 << 30),
        _ => (trimmed, 1),
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .filter(|bytes| *bytes >= 6 << 20)
        .ok_or_else(|| format!("`{text}` is not a memory size of 6m or more; use e.g. 512m or 2g"))
}

/// One extra directory or file shown inside the sandbox (`sandbox_paths`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bind {
    pub writable: bool,
    pub path: PathBuf,
}

/// `ro:/opt/sdk, rw:/var/cache/cargo`: absolute paths, each read-only (`ro:`) or writable (`rw:`).
pub fn parse_paths(text: &str) -> Result<Vec<Bind>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            let (writable, path) = match item.split_once(':') {
                Some(("ro", path)) => (false, path),
                Some(("rw", path)) => (true, path),
                _ => return Err(format!("`{item}` should be ro:/absolute/path or rw:/absolute/path")),
            };
            let path = PathBuf::from(path.trim());
            if !path.is_absolute() {
                return Err(format!("`{item}`: the path must be absolute"));
            }
            Ok(Bind { writable, path })
        })
        .collect()
}

/// The sandbox attributes of a node, or of the graph (whose `default_sandbox` names the kind).
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxSettings {
    /// `sandbox` (`default_sandbox` on the graph); unset, or a value that is not a sandbox (the
    /// `sandbox` check refuses those before a run), leaves it to the next source.
    pub kind: Option<SandboxKind>,
    /// `sandbox_paths`, or why they cannot be read.
    pub paths: Result<Vec<Bind>, String>,
    /// `sandbox_env`: names of environment variables let through.
    pub env: Vec<String>,
    /// `sandbox_network=true` (nodes only).
    pub network: bool,
    /// The container sandboxes' image and limits.
    pub container: ContainerSettings,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            kind: None,
            paths: Ok(Vec::new()),
            env: Vec::new(),
            network: false,
            container: ContainerSettings::default(),
        }
    }
}

impl SandboxSettings {
    /// Reads the sandbox attributes; `kind_key` is `sandbox` on a node, `default_sandbox` on the
    /// graph.
    pub(super) fn parse(attributes: &Attributes, kind_key: &str) -> SandboxSettings {
        SandboxSettings {
            kind: attributes.text(kind_key).and_then(|text| SandboxKind::parse(text).ok()),
            paths: attributes.text("sandbox_paths").map_or(Ok(Vec::new()), parse_paths),
            env: attributes
                .text("sandbox_env")
                .map(|names| {
                    names.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_string).collect()
                })
                .unwrap_or_default(),
            network: attributes.boolean("sandbox_network").unwrap_or(false),
            container: ContainerSettings::parse(attributes),
        }
    }

    /// The paths that could be read (none when they could not).
    pub fn binds(&self) -> &[Bind] {
        self.paths.as_deref().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::built;
    use super::*;

    #[test]
    fn paths_are_read_only_or_writable_and_absolute() {
        assert_eq!(
            parse_paths("ro:/opt/sdk, rw:/var/cache/cargo").unwrap(),
            [
                Bind { writable: false, path: "/opt/sdk".into() },
                Bind { writable: true, path: "/var/cache/cargo".into() }
            ]
        );
        assert!(parse_paths("/opt/sdk").unwrap_err().contains("ro:/absolute/path"));
        assert!(parse_paths("rw:relative").unwrap_err().contains("absolute"));
        assert_eq!(parse_paths(" ").unwrap(), []);
    }

    #[test]
    fn kinds_parse() {
        assert_eq!(SandboxKind::parse("bwrap"), Ok(SandboxKind::Bwrap));
        assert_eq!(SandboxKind::parse("none"), Ok(SandboxKind::None));
        assert_eq!(SandboxKind::parse("podman"), Ok(SandboxKind::Podman));
        assert_eq!(SandboxKind::parse("docker"), Ok(SandboxKind::Docker));
        assert!(SandboxKind::parse("lxc").unwrap_err().contains("none, bwrap, podman or docker"));
    }

    #[test]
    fn container_limits_are_read_once() {
        assert_eq!(parse_memory("512m"), Ok(512 << 20));
        assert_eq!(parse_memory("2G"), Ok(2 << 30));
        assert_eq!(parse_memory("1073741824"), Ok(1 << 30));
        assert!(parse_memory("1k").unwrap_err().contains("6m or more"));
        assert!(parse_memory("lots").is_err());
        assert_eq!(parse_cpus("0.5"), Ok(0.5));
        assert!(parse_cpus("0").is_err());
        let workflow = built(
            r#"digraph G { image="debian:12"; container_memory="1g"; a [image="alpine", container_cpus="x", container_pids=0] }"#,
        );
        let graph = &workflow.settings().sandbox.container;
        assert_eq!((graph.image.as_deref(), graph.memory.clone()), (Some("debian:12"), Some(Ok(1 << 30))));
        let a = &workflow.node("a").unwrap().settings.stage.sandbox.container;
        assert_eq!(a.image.as_deref(), Some("alpine"));
        assert_eq!(a.invalid().map(|(name, _)| name), Some("container_cpus"));
    }

    #[test]
    fn nodes_and_the_graph_have_their_own_sandbox_settings() {
        let workflow = built(
            r#"digraph G { default_sandbox=bwrap; sandbox_env="A, B"; a [sandbox=none, sandbox_network=true, sandbox_paths="ro:/opt"]; b [sandbox_paths="opt"] }"#,
        );
        let graph = &workflow.settings().sandbox;
        assert_eq!(
            (graph.kind, graph.env.as_slice()),
            (Some(SandboxKind::Bwrap), &["A".to_string(), "B".to_string()][..])
        );
        let a = &workflow.node("a").unwrap().settings.stage.sandbox;
        assert_eq!((a.kind, a.network), (Some(SandboxKind::None), true));
        assert_eq!(a.binds(), [Bind { writable: false, path: "/opt".into() }]);
        let b = &workflow.node("b").unwrap().settings.stage.sandbox;
        assert!(b.paths.as_ref().unwrap_err().contains("ro:/absolute/path"));
        assert_eq!(b.binds(), []);
    }
}
