//! The scheduler and its rules: edge selection, retries, goal gates, visits; and child runs for
//! manager stages.

pub mod child_run;
pub mod edge_selection;
pub mod parallel;
pub mod retry;
mod scheduler;
pub mod step;
mod walker;

pub use scheduler::{sha256_hex, Engine, RunOptions, RunReport, RunTimings, StartError};
