//! `context-usage.svg`: how the input tokens of each LLM stage visit grew call by call. One line
//! per visit (cumulative input tokens on the y axis, model call on the x axis), a dashed vertical
//! marker where the conversation was compacted, and a hover title on every point with that
//! call's input and output tokens. Pure SVG: no script, nothing fetched.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::run_dir::layout;
use crate::run_dir::stage_output::read_tail;
use crate::run_dir::{RunResult, RunView};

/// The chart's file name in the run directory.
pub const CHART_FILE: &str = "context-usage.svg";

const WIDTH: f64 = 820.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 8] =
    ["#1565c0", "#2e7d32", "#c62828", "#6a1b9a", "#ef6c00", "#00838f", "#4e342e", "#ad1457"];

/// One model call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Cumulative input tokens of the visit up to and including this call.
    pub cumulative: u64,
}

/// The model calls of one LLM stage visit.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// `plan` or `plan #2` for a later visit.
    pub label: String,
    pub calls: Vec<Call>,
    /// Compactions, as the number of calls made before each.
    pub compactions: Vec<usize>,
}

/// The series of every LLM stage visit of a run, in the order they ran: agent stages from their
/// `transcript.jsonl` (one point per model call), other LLM stages from their recorded usage.
pub fn read_series(run_dir: &Path, result: &RunResult) -> Vec<Series> {
    result
        .stages
        .iter()
        .filter(|stage| stage.usage.is_some())
        .map(|stage| {
            let label = if stage.visit > 1 {
                format!("{} #{}", stage.node_id, stage.visit)
            } else {
                stage.node_id.clone()
            };
            let transcript = stage
                .dir_in(run_dir)
                .and_then(|dir| read_tail(&dir.join(layout::TRANSCRIPT), 64 * 1024 * 1024))
                .unwrap_or_default();
            let mut series = from_transcript(label, &transcript);
            if series.calls.is_empty() {
                if let Some(usage) = &stage.usage {
                    series.calls.push(Call {
                        input_tokens: usage.input_tokens,
                        output_tokens: usage.output_tokens,
                        cumulative: usage.input_tokens,
                    });
                }
            }
            series
        })
        .collect()
}

/// The calls and compactions recorded in a transcript's lines.
fn from_transcript(label: String, transcript: &str) -> Series {
    let mut series = Series { label, calls: Vec::new(), compactions: Vec::new() };
    let mut cumulative = 0;
    for entry in transcript.lines().filter_map(|line| serde_json::from_str::<Value>(line).ok()) {
        match entry["type"].as_str() {
            Some("assistant") => {
                let input_tokens = entry["usage"]["input_tokens"].as_u64().unwrap_or(0);
                cumulative += input_tokens;
                let output_tokens = entry["usage"]["output_tokens"].as_u64().unwrap_or(0);
                series.calls.push(Call { input_tokens, output_tokens, cumulative });
            }
            Some("compaction") => series.compactions.push(series.calls.len()),
            _ => {}
        }
    }
    series
}

/// The chart, or `None` when no LLM stage made a call.
pub fn render(series: &[Series]) -> Option<String> {
    let max_calls = series.iter().map(|s| s.calls.len()).max().filter(|&n| n > 0)?;
    let max_tokens =
        series.iter().flat_map(|s| s.calls.iter().map(|c| c.cumulative)).max().unwrap_or(0).max(1);
    let top = nice_ceiling(max_tokens);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |call: usize| {
        LEFT + if max_calls > 1 { (call - 1) as f64 * plot_w / (max_calls - 1) as f64 } else { plot_w / 2.0 }
    };
    let y = |tokens: u64| TOP + plot_h - tokens as f64 * plot_h / top as f64;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n<title>Cumulative input tokens per model call</title>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let _ = writeln!(
        svg,
        "<text x=\"{LEFT}\" y=\"18\" font-size=\"14\">Cumulative input tokens per model call</text>"
    );
    for step in 0..=4u64 {
        let tokens = top * step / 4;
        let at = y(tokens);
        let _ = writeln!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{at:.1}\" x2=\"{:.1}\" y2=\"{at:.1}\" stroke=\"#e0e0e0\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{tokens}</text>",
            LEFT + plot_w,
            LEFT - 6.0,
            at + 4.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">model call</text>",
        LEFT + plot_w / 2.0,
        HEIGHT - 12.0
    );
    for call in tick_calls(max_calls) {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{call}</text>",
            x(call),
            TOP + plot_h + 16.0
        );
    }
    for (index, line) in series.iter().enumerate() {
        let color = COLORS[index % COLORS.len()];
        for &before in &line.compactions {
            let at = if before == 0 { LEFT } else { (x(before) + x((before + 1).min(max_calls))) / 2.0 };
            let _ = writeln!(
                svg,
                "<line x1=\"{at:.1}\" y1=\"{TOP}\" x2=\"{at:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-dasharray=\"5,4\" class=\"compaction\"><title>{}: compacted after call {before}</title></line>",
                TOP + plot_h,
                escape(&line.label)
            );
        }
        let points: Vec<String> = line
            .calls
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{:.1},{:.1}", x(i + 1), y(c.cumulative)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            points.join(" ")
        );
        for (i, call) in line.calls.iter().enumerate() {
            let _ = writeln!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{color}\"><title>{} call {}: {} in / {} out (cumulative {} in)</title></circle>",
                x(i + 1),
                y(call.cumulative),
                escape(&line.label),
                i + 1,
                call.input_tokens,
                call.output_tokens,
                call.cumulative
            );
        }
        let legend_y = TOP + 10.0 + index as f64 * 18.0;
        let _ = writeln!(
            svg,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            WIDTH - RIGHT + 16.0,
            legend_y - 10.0,
            WIDTH - RIGHT + 34.0,
            legend_y,
            escape(&line.label)
        );
    }
    svg.push_str("</svg>\n");
    Some(svg)
}

/// Writes `context-usage.svg` into the run directory when the run has LLM calls; returns its path.
pub fn write_for_run(run_dir: &Path) -> Option<PathBuf> {
    let view = RunView::open(run_dir).ok()?;
    let svg = render(&read_series(run_dir, view.result.as_ref()?))?;
    let path = run_dir.join(CHART_FILE);
    crate::atomic_file::write_atomic(&path, svg.as_bytes()).ok()?;
    Some(path)
}

/// A round number at or above `value` for the top of the y axis (1, 2 or 5 times a power of ten).
fn nice_ceiling(value: u64) -> u64 {
    let mut scale = 1u64;
    loop {
        for step in [1, 2, 5] {
            if step * scale >= value {
                return step * scale;
            }
        }
        scale = scale.saturating_mul(10);
    }
}

/// At most 10 call numbers to label on the x axis, always the first and the last.
fn tick_calls(max_calls: usize) -> Vec<usize> {
    let every = max_calls.div_ceil(10).max(1);
    let mut ticks: Vec<usize> = (1..=max_calls).step_by(every).collect();
    if ticks.last() != Some(&max_calls) {
        ticks.push(max_calls);
    }
    ticks
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_gives_one_point_per_call_and_its_compactions() {
        let transcript = [
            r#"{"type":"assistant","usage":{"input_tokens":100,"output_tokens":10}}"#,
            r#"{"type":"tool_call","name":"read_file"}"#,
            r#"{"type":"assistant","usage":{"input_tokens":300,"output_tokens":20}}"#,
            r#"{"type":"compaction","summary":"..."}"#,
            r#"{"type":"assistant","usage":{"input_tokens":50,"output_tokens":5}}"#,
        ]
        .join("\n");
        let series = from_transcript("implement".into(), &transcript);
        let cumulative: Vec<u64> = series.calls.iter().map(|c| c.cumulative).collect();
        assert_eq!(cumulative, [100, 400, 450]);
        assert_eq!(series.compactions, [2]);

        let svg = render(&[series]).unwrap();
        assert_eq!(svg.matches("<circle").count(), 3);
        assert_eq!(svg.matches("class=\"compaction\"").count(), 1);
        assert!(svg.contains("<title>implement call 3: 50 in / 5 out (cumulative 450 in)</title>"), "{svg}");
        assert!(!svg.contains("<script"));
        assert!(render(&[]).is_none());
    }

    #[test]
    fn axes_end_on_round_numbers() {
        assert_eq!(nice_ceiling(1), 1);
        assert_eq!(nice_ceiling(450), 500);
        assert_eq!(nice_ceiling(1_200), 2_000);
        assert_eq!(tick_calls(3), [1, 2, 3]);
        assert_eq!(tick_calls(25), [1, 4, 7, 10, 13, 16, 19, 22, 25]);
    }
}
