//! Navigation: node ids' definitions and references (statements, edges, `retry_target`,
//! `fallback_retry_target`), renaming a node id everywhere in the file, the stages as document
//! symbols, and the files a workflow names (`prompt="@file"`, child workflows) as links.

use std::path::PathBuf;

use crate::source::Span;

use super::analysis::{Analysis, IdSite, Role};

/// Where the node id at `offset` is declared (its first node statement, else where it is first
/// named).
pub fn definition(analysis: &Analysis, offset: usize) -> Option<Span> {
    let site = analysis.index.id_at(offset)?;
    analysis.index.sites_of(&site.name).next().map(|site| site.span)
}

/// Every place the node id at `offset` is written, the declaration included when asked.
pub fn references(analysis: &Analysis, offset: usize, include_declaration: bool) -> Vec<Span> {
    let Some(site) = analysis.index.id_at(offset) else { return Vec::new() };
    let mut spans: Vec<Span> = analysis
        .index
        .sites_of(&site.name)
        .filter(|site| include_declaration || site.role != Role::Declaration)
        .map(|site| site.span)
        .collect();
    spans.sort_by_key(|span| span.start);
    spans
}

/// Why a rename cannot be done.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RenameError {
    #[error("there is no node id here")]
    NoNode,
    #[error("`{0}` is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*), which fabro's node ids are")]
    BadName(String),
    #[error("a node `{0}` already exists")]
    Taken(String),
}

/// The node id at `offset`, for the editor to show before a rename.
pub fn rename_target(analysis: &Analysis, offset: usize) -> Option<&IdSite> {
    analysis.index.id_at(offset)
}

/// The edits renaming the node id at `offset` to `new_name` everywhere it is written.
pub fn rename(
    analysis: &Analysis,
    offset: usize,
    new_name: &str,
) -> Result<Vec<(Span, String)>, RenameError> {
    let site = analysis.index.id_at(offset).ok_or(RenameError::NoNode)?;
    if !crate::graph::is_plain_identifier(new_name) {
        return Err(RenameError::BadName(new_name.to_string()));
    }
    if new_name != site.name && analysis.index.sites_of(new_name).next().is_some() {
        return Err(RenameError::Taken(new_name.to_string()));
    }
    let new_text = crate::render::dot::id(new_name).into_owned();
    Ok(analysis
        .index
        .sites_of(&site.name)
        .map(|site| {
            let text = match site.role {
                Role::RetryTarget => crate::dot_string::quote(new_name),
                _ => new_text.clone(),
            };
            (site.span, text)
        })
        .collect())
}

/// A stage for the outline: its id, kind and label, and where it is declared.
#[derive(Debug, PartialEq)]
pub struct Stage {
    pub id: String,
    pub kind: String,
    pub label: String,
    pub span: Span,
}

/// The workflow's stages in declaration order (one per node, at its first node statement).
pub fn stages(analysis: &Analysis) -> Vec<Stage> {
    let Some(checked) = &analysis.checked else { return Vec::new() };
    checked
        .workflow
        .nodes()
        .map(|node| {
            let span = analysis.index.sites_of(&node.id).next().map_or(node.span, |site| site.span);
            Stage {
                id: node.id.clone(),
                kind: node.handler_type().name().to_string(),
                label: node.label().to_string(),
                span,
            }
        })
        .collect()
}

/// The files the workflow names, with where: `prompt="@file"` values and child workflows.
pub fn linked_files(analysis: &Analysis, base: &std::path::Path) -> Vec<(Span, PathBuf)> {
    let mut links: Vec<(Span, PathBuf)> = analysis
        .index
        .attributes
        .iter()
        .filter(|site| site.key == "prompt")
        .filter_map(|site| {
            let reference = site.value.trim().strip_prefix('@')?;
            Some((site.value_span, base.join(reference)))
        })
        .collect();
    if let Some(checked) = &analysis.checked {
        for node in checked.workflow.nodes() {
            if let Some(child) = node.settings.child_workflow().filter(|child| !child.inline) {
                if !links.iter().any(|(span, _)| *span == child.span) {
                    links.push((child.span, child.path.clone()));
                }
            }
        }
    }
    links
}

/// The file linked at `offset`.
pub fn file_at(analysis: &Analysis, base: &std::path::Path, offset: usize) -> Option<PathBuf> {
    linked_files(analysis, base)
        .into_iter()
        .find(|(span, _)| span.start <= offset && offset <= span.end)
        .map(|(_, path)| path)
}

#[cfg(test)]
mod tests {
    use super::super::analysis::analyze;
    use super::*;

    const TEXT: &str = "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  plan [prompt=\"@plan.md\"]\n  check [shape=parallelogram, script=\"true\", retry_target=\"plan\"]\n  start -> plan -> check -> exit\n}\n";

    #[test]
    fn definitions_references_and_renames_cover_edges_and_retry_targets() {
        let analysis = analyze(std::path::Path::new("/tmp/w.dot"), TEXT, &crate::load::Loader::new(), None).0;
        let use_site = TEXT.find("-> plan").unwrap() + 3;
        assert_eq!(
            definition(&analysis, use_site),
            Some(Span::new(TEXT.find("plan [").unwrap(), TEXT.find("plan [").unwrap() + 4))
        );
        assert_eq!(references(&analysis, use_site, true).len(), 3);
        assert_eq!(references(&analysis, use_site, false).len(), 2);
        let edits = rename(&analysis, use_site, "design").unwrap();
        let mut renamed = TEXT.to_string();
        let mut edits = edits;
        edits.sort_by_key(|(span, _)| std::cmp::Reverse(span.start));
        for (span, text) in edits {
            renamed.replace_range(span.start..span.end, &text);
        }
        assert!(
            renamed.contains("design [prompt")
                && renamed.contains("retry_target=\"design\"")
                && renamed.contains("start -> design -> check")
        );
        assert_eq!(rename(&analysis, use_site, "my-node"), Err(RenameError::BadName("my-node".into())));
        assert_eq!(rename(&analysis, use_site, "check"), Err(RenameError::Taken("check".into())));
    }

    #[test]
    fn stages_and_linked_files() {
        let analysis = analyze(std::path::Path::new("/tmp/w.dot"), TEXT, &crate::load::Loader::new(), None).0;
        let ids: Vec<String> =
            stages(&analysis).into_iter().map(|stage| format!("{}:{}", stage.id, stage.kind)).collect();
        assert_eq!(ids, ["start:start", "exit:exit", "plan:agent", "check:command"]);
        let at = TEXT.find("@plan").unwrap();
        assert_eq!(file_at(&analysis, std::path::Path::new("/tmp"), at), Some(PathBuf::from("/tmp/plan.md")));
    }
}
