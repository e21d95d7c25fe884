//! What an agent stage's tools may do without asking (`permissions=` on the node, the graph's
//! default, `--permissions`, the config file).

/// How much a stage's tools may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    ReadOnly,
    ReadWrite,
    #[default]
    Full,
}

/// The values of `permissions=`.
pub const LEVELS: &[&str] = &["read-only", "read-write", "full"];

impl Level {
    pub fn parse(text: &str) -> Option<Level> {
        match text.trim() {
            "read-only" => Some(Level::ReadOnly),
            "read-write" => Some(Level::ReadWrite),
            "full" => Some(Level::Full),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::ReadOnly => "read-only",
            Level::ReadWrite => "read-write",
            Level::Full => "full",
        }
    }
}
