//! What a wait stage sets: how long it waits.

use crate::graph::Attributes;

/// The settings of a wait stage: how long it waits, or why that cannot be read.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitSettings {
    pub duration: Result<std::time::Duration, WaitError>,
}

/// Why a wait stage has no duration to wait.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WaitError {
    #[error("has no duration")]
    Missing,
    #[error("has an invalid duration `{0}`")]
    Invalid(String),
}

impl WaitSettings {
    pub(super) fn parse(attributes: &Attributes) -> WaitSettings {
        let duration = match attributes.get("duration").map(|attr| &attr.value) {
            Some(crate::graph::Value::Duration(duration)) => Ok(*duration),
            Some(other) => Err(WaitError::Invalid(other.to_string())),
            None => Err(WaitError::Missing),
        };
        WaitSettings { duration }
    }
}
