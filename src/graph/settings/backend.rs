//! Which backend answers a stage's model calls (`backend`).

use super::{read, word, InvalidAttribute};
use crate::graph::Attributes;

/// The backend of a stage's model calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// The configured provider's API (the default).
    #[default]
    Api,
    /// An installed coding agent (`cli_agent`).
    Cli,
}

impl Backend {
    pub const NAMES: &'static [&'static str] = &["api", "cli"];

    pub fn from_name(name: &str) -> Option<Backend> {
        match name {
            "api" => Some(Backend::Api),
            "cli" => Some(Backend::Cli),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Backend::Api => "api",
            Backend::Cli => "cli",
        }
    }

    /// Reads a node's `backend`.
    pub fn parse(attributes: &Attributes) -> Result<Backend, InvalidAttribute> {
        Ok(read(attributes, "backend", |v| word(v, Backend::from_name))?.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::built;
    use super::*;

    #[test]
    fn backends_read_by_name_and_default_to_the_api() {
        let workflow = built("digraph G { a; b [backend=cli]; c [backend=api] }");
        let backend = |id: &str| workflow.node(id).unwrap().settings.backend.clone();
        assert_eq!(backend("a"), Ok(Backend::Api));
        assert_eq!(backend("b"), Ok(Backend::Cli));
        assert_eq!(backend("c"), Ok(Backend::Api));
        for name in Backend::NAMES {
            assert_eq!(Backend::from_name(name).map(Backend::name), Some(*name));
        }
    }
}
