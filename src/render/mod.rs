//! Rendering a workflow for people: normalized DOT (which Graphviz turns into SVG or PNG),
//! optionally with a run's progress drawn over it.
//!
//! ```no_run
//! use fabro::render::{dot, DotOptions, Direction, Overlay};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let checked = fabro::Loader::new().load_file(std::path::Path::new("workflows/linear.dot"))?;
//! let overlay = Overlay::from_run_dir(std::path::Path::new(".fabro/runs/some-run"))?;
//! let options = DotOptions { direction: Some(Direction::LeftRight), overlay: Some(overlay) };
//! println!("{}", dot::write(&checked.workflow, &options));
//! # Ok(())
//! # }
//! ```

pub mod dot;
pub mod format;
mod overlay;

pub use dot::{Direction, DotOptions};
pub use overlay::{EdgeCounts, NodeState, Overlay, OverlayError};
