//! The integration tests: one test crate (as in `just` and ripgrep), so the library is linked
//! into one test binary instead of one per file. A module per capability, each reading like
//! examples a user could follow; `common` holds the builder that runs the real `fabro` binary.
//!
//! The modules share one process: a test must not change process-wide state (environment
//! variables, the current directory) that another test could see. The fuzz module's panic hook
//! records panics only on the thread running a fuzz case and passes every other panic on.

mod common;

mod agent_context;
mod agent_tools;
mod artifacts_cli;
mod authoring_cli;
mod background_runs;
mod ci_reports;
mod cli_agent;
mod containers;
mod dialects;
mod event_log;
mod fabro_idioms;
mod first_hour;
mod fuzz;
mod graph_cli;
mod history_cli;
mod hooks;
mod imports;
mod layering;
mod llm_ceilings;
mod llm_providers;
mod local_models;
mod long_stages;
mod lsp;
mod mcp;
mod parallel;
mod permissions;
mod pre_journal_runs;
mod preamble_cli;
mod provider_outages;
mod readme;
mod reliability;
mod resume;
mod retro;
mod run_configuration;
mod run_engine;
mod run_service;
mod run_setup_api;
mod run_workflows;
mod sandbox;
mod secrets;
mod serve;
mod serve_web;
mod spec_conditions;
mod spec_parsing;
mod spec_stylesheet_transforms;
mod spec_validation;
mod special_files;
mod stage_processes;
mod streaming;
mod sub_workflows;
mod terminal_text;
mod tested_docs;
mod tool_call_hooks;
mod validate_cli;
mod watching_runs;
mod web_tools;
mod workflows;
mod worktree_cli;
