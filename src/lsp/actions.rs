//! Findings as LSP diagnostics, and their mechanical fixes as quick fixes.

use std::collections::HashMap;

use lsp_types::{
    CodeAction, CodeActionKind, CodeActionOrCommand, DiagnosticSeverity, NumberOrString, Range, TextEdit,
    WorkspaceEdit,
};

use super::document::Document;
use crate::diagnostic::{Diagnostic, Severity};

/// The `source` every diagnostic carries.
pub const SOURCE: &str = "fabro";

/// A finding as an LSP diagnostic: its rule as the code, its message, its fix in plain words as
/// a `help:` line as `fabro validate` prints it (`= fix:` there).
pub fn to_lsp(document: &Document, finding: &Diagnostic) -> lsp_types::Diagnostic {
    let range = finding.span.map(|span| document.range(span)).unwrap_or_default();
    let severity = match finding.severity {
        Severity::Error => DiagnosticSeverity::ERROR,
        Severity::Warning => DiagnosticSeverity::WARNING,
        Severity::Info => DiagnosticSeverity::INFORMATION,
    };
    let message = match &finding.fix {
        Some(fix) => format!("{}\nfix: {fix}", finding.message),
        None => finding.message.clone(),
    };
    lsp_types::Diagnostic {
        range,
        severity: Some(severity),
        code: Some(NumberOrString::String(finding.rule.clone())),
        source: Some(SOURCE.to_string()),
        message,
        ..Default::default()
    }
}

/// The quick fixes of the findings whose range meets `range`: one code action a finding with
/// edits, titled with its fix.
pub fn quick_fixes(document: &Document, findings: &[Diagnostic], range: Range) -> Vec<CodeActionOrCommand> {
    let (start, end) = (document.offset(range.start), document.offset(range.end));
    findings
        .iter()
        .filter(|finding| !finding.edits.is_empty())
        .filter(|finding| finding.span.is_some_and(|span| span.start <= end && start <= span.end))
        .map(|finding| {
            let edits = finding
                .edits
                .iter()
                .map(|edit| TextEdit { range: document.range(edit.span), new_text: edit.text.clone() })
                .collect();
            let title = match &finding.fix {
                Some(fix) => format!("{}: {fix}", finding.rule),
                None => format!("fix {}", finding.rule),
            };
            CodeActionOrCommand::CodeAction(CodeAction {
                title,
                kind: Some(CodeActionKind::QUICKFIX),
                diagnostics: Some(vec![to_lsp(document, finding)]),
                edit: Some(WorkspaceEdit {
                    changes: Some(HashMap::from([(document.uri.clone(), edits)])),
                    ..Default::default()
                }),
                is_preferred: Some(finding.edits.len() == 1),
                ..Default::default()
            })
        })
        .collect()
}
