//! The typed workflow graph on petgraph: nodes, edges, attributes typed by their schema, the model
//! stylesheet, and the transforms that run before validation.

pub mod attribute;
mod build;
pub mod choice;
mod handler_type;
mod import;
pub mod inputs;
mod join;
mod node;
pub mod settings;
pub mod stylesheet;
pub mod transform;
mod workflow;

pub use attribute::{Attr, AttrName, Attributes, Value, ValueType};
pub use build::{build, derive_class, is_plain_identifier};
pub use choice::{normalize_label, Choice};
pub use handler_type::HandlerType;
pub use node::{Edge, Node};
pub use settings::NodeSettings;
pub use transform::{builtin_transforms, Transform};
pub use workflow::{EdgeRef, SubgraphInfo, Workflow};
