//! The status a stage ends with, and its DOT/condition spellings in one place.

use std::fmt;
use std::str::FromStr;

/// How a stage ended. Conditions compare against it as `outcome=...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageStatus {
    Success,
    PartialSuccess,
    Retry,
    Fail,
    Skipped,
}

impl StageStatus {
    pub const ALL: [StageStatus; 5] = [
        StageStatus::Success,
        StageStatus::PartialSuccess,
        StageStatus::Retry,
        StageStatus::Fail,
        StageStatus::Skipped,
    ];

    /// The canonical spelling, as written in status files and events.
    pub fn as_str(self) -> &'static str {
        match self {
            StageStatus::Success => "success",
            StageStatus::PartialSuccess => "partial_success",
            StageStatus::Retry => "retry",
            StageStatus::Fail => "fail",
            StageStatus::Skipped => "skipped",
        }
    }

    /// True for the statuses that satisfy a goal gate.
    pub fn is_successful(self) -> bool {
        matches!(self, StageStatus::Success | StageStatus::PartialSuccess)
    }
}

impl fmt::Display for StageStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The spelling was not one of the accepted status names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown outcome `{0}`; expected success, partial_success, retry, fail or skipped")]
pub struct UnknownStatus(pub String);

impl FromStr for StageStatus {
    type Err = UnknownStatus;

    /// Accepts both the Attractor and the Fabro spellings (`fail`/`failed`, ...), case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "success" | "succeeded" => Ok(StageStatus::Success),
            "partial_success" | "partially_succeeded" => Ok(StageStatus::PartialSuccess),
            "retry" => Ok(StageStatus::Retry),
            "fail" | "failed" | "failure" => Ok(StageStatus::Fail),
            "skipped" | "skip" => Ok(StageStatus::Skipped),
            _ => Err(UnknownStatus(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_parse_to_one_status() {
        assert_eq!("succeeded".parse(), Ok(StageStatus::Success));
        assert_eq!("FAILED".parse(), Ok(StageStatus::Fail));
        assert_eq!("partially_succeeded".parse(), Ok(StageStatus::PartialSuccess));
        assert!("sucess".parse::<StageStatus>().is_err());
        for status in StageStatus::ALL {
            assert_eq!(status.as_str().parse(), Ok(status));
        }
    }
}
