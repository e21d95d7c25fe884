//! A stage's retry settings: how many more attempts a failed stage gets, the backoff preset
//! between them, and what exhausted retries mean.

use super::{boolean, count, read, word, InvalidAttribute};
use crate::graph::Attributes;

/// The backoff between attempts (`retry_policy`); the engine's retry module gives each its delays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryPreset {
    /// Retry at once.
    None,
    #[default]
    Standard,
    Aggressive,
    Linear,
    Patient,
}

impl RetryPreset {
    pub const NAMES: &'static [&'static str] = &["none", "standard", "aggressive", "linear", "patient"];

    pub fn from_name(name: &str) -> Option<RetryPreset> {
        match name {
            "none" => Some(RetryPreset::None),
            "standard" => Some(RetryPreset::Standard),
            "aggressive" => Some(RetryPreset::Aggressive),
            "linear" => Some(RetryPreset::Linear),
            "patient" => Some(RetryPreset::Patient),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RetryPreset::None => "none",
            RetryPreset::Standard => "standard",
            RetryPreset::Aggressive => "aggressive",
            RetryPreset::Linear => "linear",
            RetryPreset::Patient => "patient",
        }
    }
}

/// Which failures a stage retries (`retry_on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryOn {
    /// Every failure (the default: a flaky test command with `max_retries` retries).
    #[default]
    Any,
    /// Only `transient_infra` failures (rate limits, timeouts, the network, 5xx).
    Transient,
}

impl RetryOn {
    pub const NAMES: &'static [&'static str] = &["any", "transient"];

    pub fn from_name(name: &str) -> Option<RetryOn> {
        match name {
            "any" => Some(RetryOn::Any),
            "transient" => Some(RetryOn::Transient),
            _ => None,
        }
    }

    /// Whether a failure of `class` is retried.
    pub fn retries(self, class: crate::outcome::FailureClass) -> bool {
        self == RetryOn::Any || class == crate::outcome::FailureClass::TransientInfra
    }
}

/// A stage's retry settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetrySettings {
    /// Attempts after the first (`max_retries`, else the graph's `default_max_retries`, else 0).
    pub max_retries: u32,
    pub preset: RetryPreset,
    /// `allow_partial`: exhausted retries end in partial_success instead of fail.
    pub allow_partial: bool,
    /// `retry_on` (node, else the graph's `default_retry_on`).
    pub on: RetryOn,
}

impl RetrySettings {
    /// Reads a node's retry settings; `graph` gives `default_max_retries`.
    pub fn parse(attributes: &Attributes, graph: &Attributes) -> Result<RetrySettings, InvalidAttribute> {
        let max_retries = match read(attributes, "max_retries", count)? {
            Some(n) => n,
            None => read(graph, "default_max_retries", count)?.unwrap_or(0),
        };
        Ok(RetrySettings {
            // More retries than a u32 counts would outlast any run.
            max_retries: u32::try_from(max_retries).unwrap_or(u32::MAX),
            preset: read(attributes, "retry_policy", |v| word(v, RetryPreset::from_name))?
                .unwrap_or_default(),
            allow_partial: read(attributes, "allow_partial", boolean)?.unwrap_or(false),
            on: match read(attributes, "retry_on", |v| word(v, RetryOn::from_name))? {
                Some(on) => on,
                None => read(graph, "default_retry_on", |v| word(v, RetryOn::from_name))?.unwrap_or_default(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::built;
    use super::*;

    fn retry(dot: &str) -> Result<RetrySettings, InvalidAttribute> {
        built(dot).node("a").unwrap().settings.retry.clone()
    }

    #[test]
    fn the_node_wins_over_the_graph_default() {
        assert_eq!(retry("digraph G { a }"), Ok(RetrySettings::default()));
        assert_eq!(retry("digraph G { default_max_retries=2; a }").unwrap().max_retries, 2);
        let own = retry(
            "digraph G { default_max_retries=2; a [max_retries=0, retry_policy=linear, allow_partial=true] }",
        );
        assert_eq!(
            own,
            Ok(RetrySettings {
                max_retries: 0,
                preset: RetryPreset::Linear,
                allow_partial: true,
                on: RetryOn::Any
            })
        );
    }

    #[test]
    fn every_preset_name_reads_back() {
        for name in RetryPreset::NAMES {
            assert_eq!(RetryPreset::from_name(name).map(RetryPreset::name), Some(*name));
        }
        let error = retry("digraph G { default_max_retries=-1; a }").unwrap_err();
        assert_eq!(error.key, "default_max_retries");
    }
}
