//! The agent runtime: an agent stage's loop of model calls and tool calls ([`tool_loop`]), its
//! tools ([`tools`], the files they touched in [`file_tracker`], MCP servers in [`mcp`], the small
//! model's wrappers in [`agentic_tools`], the patch format of `apply_patch` in [`apply_patch`], the
//! project's skills in [`skills`], child sessions in [`subagents`], the web in [`web`] with
//! [`web_fetch`] and [`web_search`]),
//! what each call may do ([`permissions`]), its transcript ([`transcript`]), its answers as they
//! are written ([`answer_log`]) and what each model call sends ([`context`]). Providers are `llm`'s; composing them into a backend is `backends`'.

pub mod agentic_tools;
pub mod answer_log;
pub mod apply_patch;
pub mod context;
pub mod file_tracker;
pub mod mcp;
pub mod permissions;
pub mod skills;
pub mod subagents;
pub mod tool_hooks;
pub mod tool_loop;
pub mod tools;
pub mod transcript;
pub mod web;
pub mod web_fetch;
pub mod web_search;
