//! A parallel stage's settings: its join policy (when the stage is done and how it went), its
//! error policy and how many branches run at once.

use super::{count, noted, number, read, word, InvalidAttribute};
use crate::graph::Attributes;
use crate::source::Span;

/// Branches running at once when the node sets no `max_parallel`.
pub const DEFAULT_MAX_PARALLEL: usize = 4;

/// When a parallel stage is done (`join_policy`, with `join_k` or `join_quorum`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum JoinPolicy {
    WaitAll,
    FirstSuccess,
    KOfN(usize),
    /// The fraction of branches that must succeed, above 0 and at most 1.
    Quorum(f64),
}

/// The words of `join_policy`, each a [`JoinPolicy`] (k_of_n and quorum with their number).
const JOIN_POLICY_NAMES: &[&str] = &["wait_all", "first_success", "k_of_n", "quorum"];

impl JoinPolicy {
    pub const NAMES: &'static [&'static str] = JOIN_POLICY_NAMES;

    /// Its `join_policy` word.
    pub fn name(self) -> &'static str {
        match self {
            JoinPolicy::WaitAll => "wait_all",
            JoinPolicy::FirstSuccess => "first_success",
            JoinPolicy::KOfN(_) => "k_of_n",
            JoinPolicy::Quorum(_) => "quorum",
        }
    }

    /// Successful branches needed, out of `n`; `None` for wait_all (which waits for every one).
    pub fn needed(self, n: usize) -> Option<usize> {
        match self {
            JoinPolicy::WaitAll => None,
            JoinPolicy::FirstSuccess => Some(1),
            JoinPolicy::KOfN(k) => Some(k),
            JoinPolicy::Quorum(fraction) => Some(((fraction * n as f64) - 1e-9).ceil().max(1.0) as usize),
        }
    }

    /// The policy with its number, as events and notes show it: `k_of_n (join_k=2)`.
    pub fn describe(self) -> String {
        match self {
            JoinPolicy::KOfN(k) => format!("k_of_n (join_k={k})"),
            JoinPolicy::Quorum(q) => format!("quorum (join_quorum={q})"),
            policy => policy.name().to_string(),
        }
    }
}

/// What a failed branch does to its siblings (`error_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorPolicy {
    /// The other branches go on.
    #[default]
    Continue,
    /// The first failure cancels every other branch.
    FailFast,
}

impl ErrorPolicy {
    pub const NAMES: &'static [&'static str] = &["continue", "fail_fast"];

    pub fn from_name(name: &str) -> Option<ErrorPolicy> {
        match name {
            "continue" => Some(ErrorPolicy::Continue),
            "fail_fast" => Some(ErrorPolicy::FailFast),
            _ => None,
        }
    }
}

/// A parallel node's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParallelSettings {
    pub join: JoinPolicy,
    pub error_policy: ErrorPolicy,
    /// 1 or more.
    pub max_parallel: usize,
}

impl ParallelSettings {
    /// `error_policy=fail_fast`: the first failure cancels every other branch.
    pub fn fail_fast(&self) -> bool {
        self.error_policy == ErrorPolicy::FailFast
    }

    /// Reads a parallel node's settings, or every reason they cannot be used.
    pub fn parse(attributes: &Attributes) -> Result<ParallelSettings, Vec<ParallelSettingsError>> {
        let mut errors = Vec::new();
        let policy = noted(
            read(attributes, "join_policy", |v| {
                word(v, |name| JoinPolicy::NAMES.iter().copied().find(|known| *known == name))
            }),
            &mut errors,
        );
        let join_k = noted(read(attributes, "join_k", count), &mut errors);
        let join_quorum = noted(read(attributes, "join_quorum", number), &mut errors);
        let error_policy =
            noted(read(attributes, "error_policy", |v| word(v, ErrorPolicy::from_name)), &mut errors);
        let max_parallel = noted(read(attributes, "max_parallel", count), &mut errors);
        let policy_span = attributes.get("join_policy").map(|attr| attr.span).unwrap_or_default();
        let join = match policy {
            None | Some("wait_all") => Some(JoinPolicy::WaitAll),
            Some("first_success") => Some(JoinPolicy::FirstSuccess),
            Some("k_of_n") => match join_k.filter(|k| *k >= 1) {
                // More than there can be branches is as many as there can be: the stage fails.
                Some(k) => Some(JoinPolicy::KOfN(usize::try_from(k).unwrap_or(usize::MAX))),
                None => {
                    errors.push(ParallelSettingsError::NoJoinK { span: policy_span });
                    None
                }
            },
            Some("quorum") => match join_quorum.filter(|q| *q > 0.0 && *q <= 1.0) {
                Some(q) => Some(JoinPolicy::Quorum(q)),
                None => {
                    errors.push(ParallelSettingsError::NoJoinQuorum { span: policy_span });
                    None
                }
            },
            // Only the words above are read (the rest are type errors).
            Some(_) => None,
        };
        match join {
            Some(join) if errors.is_empty() => Ok(ParallelSettings {
                join,
                error_policy: error_policy.unwrap_or_default(),
                // `max_parallel=0` has always meant the default, like leaving it unset.
                max_parallel: match max_parallel {
                    None | Some(0) => DEFAULT_MAX_PARALLEL,
                    Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
                },
            }),
            _ => Err(errors),
        }
    }
}

/// Why a parallel node's settings cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParallelSettingsError {
    #[error(transparent)]
    Attribute(#[from] InvalidAttribute),
    /// At the `join_policy` value.
    #[error("join_policy=k_of_n needs `join_k` of 1 or more")]
    NoJoinK { span: Span },
    /// At the `join_policy` value.
    #[error("join_policy=quorum needs `join_quorum` above 0 and at most 1")]
    NoJoinQuorum { span: Span },
}

impl ParallelSettingsError {
    pub fn span(&self) -> Span {
        match self {
            ParallelSettingsError::Attribute(invalid) => invalid.span,
            ParallelSettingsError::NoJoinK { span } | ParallelSettingsError::NoJoinQuorum { span } => *span,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::built;
    use super::*;

    fn parallel(attributes: &str) -> Result<ParallelSettings, Vec<ParallelSettingsError>> {
        let workflow = built(&format!("digraph G {{ p [shape=component, {attributes}] }}"));
        let node = workflow.node("p").unwrap();
        node.settings.parallel().expect("a parallel stage").clone()
    }

    #[test]
    fn unset_settings_wait_for_every_branch_four_at_a_time() {
        let settings = parallel("label=p").unwrap();
        assert_eq!(settings.join, JoinPolicy::WaitAll);
        assert!(!settings.fail_fast());
        assert_eq!(settings.max_parallel, DEFAULT_MAX_PARALLEL);
        assert_eq!(parallel("max_parallel=0").unwrap().max_parallel, DEFAULT_MAX_PARALLEL);
    }

    #[test]
    fn every_policy_reads_with_its_number() {
        assert_eq!(parallel("join_policy=first_success").unwrap().join, JoinPolicy::FirstSuccess);
        assert_eq!(parallel("join_policy=k_of_n, join_k=2").unwrap().join, JoinPolicy::KOfN(2));
        let quorum = parallel("join_policy=quorum, join_quorum=0.75, error_policy=fail_fast, max_parallel=2");
        let quorum = quorum.unwrap();
        assert_eq!(quorum.join, JoinPolicy::Quorum(0.75));
        assert!(quorum.fail_fast());
        assert_eq!(quorum.max_parallel, 2);
        assert_eq!(JoinPolicy::Quorum(0.75).needed(4), Some(3));
        assert_eq!(JoinPolicy::KOfN(2).describe(), "k_of_n (join_k=2)");
    }

    #[test]
    fn a_policy_without_its_number_is_an_error_at_the_policy() {
        let errors = parallel("join_policy=k_of_n, join_k=0").unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].to_string(), "join_policy=k_of_n needs `join_k` of 1 or more");
        for quorum in ["", ", join_quorum=0", ", join_quorum=1.5"] {
            let errors = parallel(&format!("join_policy=quorum{quorum}")).unwrap_err();
            assert!(matches!(errors[..], [ParallelSettingsError::NoJoinQuorum { .. }]), "{errors:?}");
        }
        // A join_k that is no count is both a type error and no join_k.
        let errors = parallel("join_policy=k_of_n, join_k=two").unwrap_err();
        assert!(matches!(
            errors[..],
            [ParallelSettingsError::Attribute(_), ParallelSettingsError::NoJoinK { .. }]
        ));
        assert!(parallel("join_policy=all").is_err());
    }
}
