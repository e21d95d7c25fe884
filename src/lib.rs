//! fabro: a workflow engine for AI coding pipelines described as Graphviz DOT files.
//!
//! The modules follow the data: [`source`] text is parsed by [`syntax`] into a tree, built into a
//! typed [`graph`], rewritten by transforms, and checked by [`validate`]; [`load`] runs those
//! phases in order.

pub mod agent;
pub mod atomic_file;
pub mod backends;
pub mod branch_results;
pub mod chat;
pub mod child_workflow;
pub mod condition;
pub mod config_files;
pub mod context;
pub mod diagnostic;
pub mod dot_string;
pub mod engine;
pub mod event;
pub mod event_log;
pub mod excerpt;
pub mod fabro_dir;
pub mod fidelity;
pub mod graph;
pub mod handlers;
pub mod interview;
pub mod lifecycle_hooks;
pub mod llm;
pub mod load;
pub mod log_tail;
pub mod lsp;
pub mod memory;
pub mod models;
pub mod outcome;
pub mod process_group;
pub mod redaction;
pub mod regular_file;
pub mod render;
pub mod report;
pub mod run_client;
pub mod run_dir;
pub mod run_launcher;
pub mod run_settings;
pub mod run_setup;
pub mod run_status;
pub mod sandbox;
pub mod secrets;
pub mod serve;
pub mod source;
pub mod stage;
pub mod starter;
pub mod syntax;
pub mod terminal_text;
pub mod usage;
pub mod validate;
pub mod worktree;

pub use diagnostic::{Diagnostic, Edit, Severity};
pub use load::{CheckedWorkflow, Invalid, LoadError, Loader, ValidWorkflow};
