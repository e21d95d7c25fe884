//! The scheduler and its rules: edge selection, retries, goal gates, visits; and the engine's side
//! of child runs for manager stages.

mod checkpoint;
mod child_launcher;
pub mod circuit_breaker;
mod conversation;
pub mod edge_selection;
mod hook_points;
mod line_worktree;
pub mod parallel;
pub mod retry;
mod run_scope;
mod scheduler;
pub mod step;
mod walker;

pub use child_launcher::ChildLauncher;
pub use scheduler::{Engine, RunOptions, RunReport, RunTimings, StartError};
