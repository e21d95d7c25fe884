//! Source text -> syntax tree. Parses one DOT file with the pest grammar in `grammar/dot.pest`,
//! keeping a byte [`Span`](crate::source::Span) on everything, and rejects the DOT constructs fabro
//! does not support with a message that names each of them.
//!
//! This layer knows nothing of attribute meanings or node kinds; that is the graph layer's job.

mod comments;
mod parser;
mod recovery;
mod reparse;
mod syntax_error;
mod tree;

pub use comments::comments;
pub use parser::parse;
pub use recovery::{parse_recovering, reparse_recovering, Recovered};
pub use reparse::{changed_region, reparse, Edit};
pub use syntax_error::{SyntaxError, SyntaxErrorKind};
pub use tree::{Attribute, DefaultsKind, Id, Literal, Statement, Subgraph, SyntaxTree};
