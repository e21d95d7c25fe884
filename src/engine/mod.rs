//! The scheduler and its rules: edge selection, retries, goal gates, visits; and the engine's side
//! of child runs for manager stages.

mod child_launcher;
pub mod edge_selection;
pub mod parallel;
pub mod retry;
mod scheduler;
pub mod step;
mod walker;

pub use child_launcher::ChildLauncher;
pub use scheduler::{Engine, RunOptions, RunReport, RunTimings, StartError};
