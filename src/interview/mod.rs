//! Interviewers answer human gates: on a terminal, from an answers file, by approving the first
//! choice, or not at all (the run then pauses until it is resumed with an answer).

pub mod answers;
pub mod console;

use std::time::Duration;

use crate::graph::{Choice, HandlerType, Node, Workflow};

/// The attribute that lets a human gate take text that names none of its choices.
pub const FREEFORM_ATTRIBUTE: &str = "human.freeform";

/// What a human gate asks.
#[derive(Debug, Clone)]
pub struct Question<'a> {
    pub gate_id: &'a str,
    /// The gate's label or prompt.
    pub text: &'a str,
    pub choices: &'a [Choice<'a>],
    pub timeout: Option<Duration>,
    /// The gate takes text that names no choice (`human.freeform=true`, or a `freeform=true`
    /// edge); otherwise such text is no answer at all and is never routed anywhere.
    pub freeform: bool,
}

/// A human gate of a workflow, as its answers see it: its id, its choices (one per outgoing edge,
/// in declaration order) and whether it takes freeform text.
#[derive(Debug, Clone)]
pub struct Gate<'w> {
    pub id: &'w str,
    pub choices: Vec<Choice<'w>>,
    pub freeform: bool,
}

impl<'w> Gate<'w> {
    /// The gate `node` of `workflow` (which must be a human gate). A `freeform=true` edge is no
    /// choice: it takes the text that names none.
    pub fn of(workflow: &'w Workflow, node: &'w Node) -> Gate<'w> {
        let edges = workflow.index_of(&node.id).map(|index| workflow.outgoing(index)).unwrap_or_default();
        let choices = edges
            .iter()
            .filter(|edge| !edge.edge.settings.freeform)
            .map(|edge| Choice::from_edge(edge.edge.label(), edge.to.id.as_str()))
            .collect();
        let freeform = takes_freeform(node) || edges.iter().any(|edge| edge.edge.settings.freeform);
        Gate { id: node.id.as_str(), choices, freeform }
    }

    /// Every human gate of `workflow`, in declaration order.
    pub fn all(workflow: &'w Workflow) -> Vec<Gate<'w>> {
        workflow
            .nodes()
            .filter(|node| node.handler_type() == HandlerType::Human)
            .map(|node| Gate::of(workflow, node))
            .collect()
    }
}

/// True when the gate declares `human.freeform=true` (a `freeform=true` edge out of it also makes
/// it take free text).
pub fn takes_freeform(node: &Node) -> bool {
    node.settings.human().is_some_and(|human| human.freeform)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Index into the question's choices.
    Choice(usize),
    /// Text that names no choice, at a gate that takes freeform answers.
    Freeform(String),
    /// Text that names no choice at a gate that takes none: routing on it could take any edge
    /// (say, `deploy`), so the gate refuses it.
    Unrecognized(String),
    /// Nobody answered within the timeout.
    Timeout,
    /// No answer can be had now (no terminal, no answer left in the file).
    Unavailable,
}

#[async_trait::async_trait]
pub trait Interviewer: Send + Sync {
    async fn ask(&self, question: &Question<'_>) -> Answer;
}

/// The choice an answer's text names: a choice whose accelerator key it is (so a typed `R` means
/// the `[R]` choice even when another label reads `R`), else the first choice it
/// [matches](Choice::matches) by label or target id.
pub fn choice_for(text: &str, choices: &[Choice<'_>]) -> Option<usize> {
    let text = text.trim();
    choices
        .iter()
        .position(|choice| !choice.key.is_empty() && text.eq_ignore_ascii_case(&choice.key))
        .or_else(|| choices.iter().position(|choice| choice.matches(text)))
}

/// The answer that typed or recorded text gives: the choice it names, else the text itself as
/// a freeform answer where the question takes one, else [`Answer::Unrecognized`].
pub fn answer_for(text: &str, question: &Question<'_>) -> Answer {
    match choice_for(text, question.choices) {
        Some(index) => Answer::Choice(index),
        None if question.freeform => Answer::Freeform(text.trim().to_string()),
        None => Answer::Unrecognized(text.trim().to_string()),
    }
}

/// `[A] Approve, [R] Request changes`: the choices as a person types them.
pub fn list_choices(choices: &[Choice<'_>]) -> String {
    let listed: Vec<String> =
        choices.iter().map(|choice| format!("[{}] {}", choice.key, choice.label)).collect();
    listed.join(", ")
}

/// The choice label closest to `text` when it is a near miss (a typo or a missing letter).
pub fn closest_choice<'c>(text: &str, choices: &'c [Choice<'c>]) -> Option<&'c Choice<'c>> {
    let typed = crate::graph::normalize_label(text);
    choices
        .iter()
        .map(|choice| (strsim::normalized_damerau_levenshtein(&typed, &choice.label.to_lowercase()), choice))
        .filter(|(similarity, _)| *similarity >= 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, choice)| choice)
}

/// Approves every gate: the first choice, or the freeform answer `approved` when a question has
/// no choices (`--auto-approve`).
#[derive(Debug, Clone, Copy, Default)]
pub struct AutoApprove;

#[async_trait::async_trait]
impl Interviewer for AutoApprove {
    async fn ask(&self, question: &Question<'_>) -> Answer {
        if question.choices.is_empty() {
            Answer::Freeform("approved".to_string())
        } else {
            Answer::Choice(0)
        }
    }
}

/// Never answers: a non-interactive run without answers pauses at its first human gate.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoAnswers;

#[async_trait::async_trait]
impl Interviewer for NoAnswers {
    async fn ask(&self, _question: &Question<'_>) -> Answer {
        Answer::Unavailable
    }
}

/// Asks each interviewer in order and gives the first answer that is not
/// [`Answer::Unavailable`] (e.g. an answers file, then the terminal, then auto-approve).
#[derive(Clone, Default)]
pub struct FirstAvailable(pub Vec<std::sync::Arc<dyn Interviewer>>);

#[async_trait::async_trait]
impl Interviewer for FirstAvailable {
    async fn ask(&self, question: &Question<'_>) -> Answer {
        for interviewer in &self.0 {
            let answer = interviewer.ask(question).await;
            if answer != Answer::Unavailable {
                return answer;
            }
        }
        Answer::Unavailable
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    fn choices() -> Vec<Choice<'static>> {
        vec![
            Choice::from_edge(Some("[A] Approve"), "deploy"),
            Choice::from_edge(Some("R) Request changes"), "revise"),
            Choice::from_edge(Some("[S] Skip"), "exit"),
        ]
    }

    fn question<'a>(choices: &'a [Choice<'a>]) -> Question<'a> {
        Question { gate_id: "gate", text: "Ship it?", choices, timeout: None, freeform: false }
    }

    /// Counts how often it was asked, then gives its answer.
    struct Counting(Answer, AtomicUsize);

    #[async_trait::async_trait]
    impl Interviewer for Counting {
        async fn ask(&self, _question: &Question<'_>) -> Answer {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.clone()
        }
    }

    #[test]
    fn text_names_a_choice_by_key_label_or_target() {
        let choices = choices();
        let question = question(&choices);
        assert_eq!(answer_for("a", &question), Answer::Choice(0));
        assert_eq!(answer_for(" Request changes ", &question), Answer::Choice(1));
        assert_eq!(answer_for("R) Request changes", &question), Answer::Choice(1));
        assert_eq!(answer_for("exit", &question), Answer::Choice(2));
        // Text that names no choice is refused unless the gate takes freeform answers.
        assert_eq!(answer_for("Request change", &question), Answer::Unrecognized("Request change".into()));
        assert_eq!(answer_for(" nope ", &question), Answer::Unrecognized("nope".into()));
        let freeform = Question { freeform: true, ..question.clone() };
        assert_eq!(answer_for("ship it later", &freeform), Answer::Freeform("ship it later".into()));
        // A key wins over a later label that reads the same.
        let tricky = [Choice::from_edge(Some("[X] R"), "x"), Choice::from_edge(Some("[R] Retry"), "retry")];
        assert_eq!(choice_for("r", &tricky), Some(1));
    }

    #[test]
    fn near_misses_suggest_the_choice_they_resemble() {
        let choices = choices();
        assert_eq!(list_choices(&choices), "[A] Approve, [R] Request changes, [S] Skip");
        assert_eq!(closest_choice("Request change", &choices).map(|c| c.label), Some("Request changes"));
        assert_eq!(closest_choice("aprove", &choices).map(|c| c.label), Some("Approve"));
        assert_eq!(closest_choice("nope", &choices), None);
    }

    #[tokio::test]
    async fn auto_approve_takes_the_first_choice() {
        let choices = choices();
        assert_eq!(AutoApprove.ask(&question(&choices)).await, Answer::Choice(0));
        assert_eq!(AutoApprove.ask(&question(&[])).await, Answer::Freeform("approved".into()));
        assert_eq!(NoAnswers.ask(&question(&choices)).await, Answer::Unavailable);
    }

    #[tokio::test]
    async fn first_available_stops_at_the_first_real_answer() {
        let choices = choices();
        let unavailable = Arc::new(Counting(Answer::Unavailable, AtomicUsize::new(0)));
        let timeout = Arc::new(Counting(Answer::Timeout, AtomicUsize::new(0)));
        let never = Arc::new(Counting(Answer::Choice(2), AtomicUsize::new(0)));
        let chain = FirstAvailable(vec![unavailable.clone(), timeout.clone(), never.clone()]);
        assert_eq!(chain.ask(&question(&choices)).await, Answer::Timeout);
        assert_eq!(unavailable.1.load(Ordering::SeqCst), 1);
        assert_eq!(timeout.1.load(Ordering::SeqCst), 1);
        assert_eq!(never.1.load(Ordering::SeqCst), 0);

        let chain = FirstAvailable(vec![Arc::new(NoAnswers), Arc::new(AutoApprove)]);
        assert_eq!(chain.ask(&question(&choices)).await, Answer::Choice(0));
        let chain = FirstAvailable(vec![Arc::new(NoAnswers), Arc::new(NoAnswers)]);
        assert_eq!(chain.ask(&question(&choices)).await, Answer::Unavailable);
        assert_eq!(FirstAvailable::default().ask(&question(&choices)).await, Answer::Unavailable);
    }
}
