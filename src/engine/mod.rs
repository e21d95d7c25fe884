//! The scheduler and its rules: edge selection, retries, goal gates, visits; and the event log.

pub mod budget;
pub mod edge_selection;
pub mod events;
pub mod retry;
mod scheduler;

pub use scheduler::{sha256_hex, Engine, RunOptions, RunReport, RunTimings, StartError};
