//! Sandbox settings: which sandbox a stage's programs run in (`sandbox` on a node,
//! `default_sandbox` on the graph), what it shows of the host (`sandbox_paths`), which
//! environment variables it lets through (`sandbox_env`) and whether it has a network
//! (`sandbox_network`). [`crate::sandbox`] turns them into confined commands.

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
}

impl SandboxKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxKind::None => "none",
            SandboxKind::Bwrap => "bwrap",
        }
    }

    /// `none` or `bwrap`.
    pub fn parse(text: &str) -> Result<SandboxKind, String> {
        match text.trim() {
            "none" => Ok(SandboxKind::None),
            "bwrap" => Ok(SandboxKind::Bwrap),
            other => Err(format!("`{other}` is not a sandbox; use none or bwrap")),
        }
    }
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
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings { kind: None, paths: Ok(Vec::new()), env: Vec::new(), network: false }
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
        assert!(SandboxKind::parse("docker").unwrap_err().contains("none or bwrap"));
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
