//! What a human gate sets: the choice taken when nobody answers, and whether it takes free text.

use crate::graph::Attributes;

/// The settings of a human gate.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HumanSettings {
    /// `human.default_choice`: the choice taken when nobody answers in time.
    pub default_choice: Option<String>,
    /// `human.freeform=true`: the gate takes free text besides its choices.
    pub freeform: bool,
}

impl HumanSettings {
    pub(super) fn parse(attributes: &Attributes) -> HumanSettings {
        HumanSettings {
            default_choice: attributes
                .get("human.default_choice")
                .map(|attr| attr.value.to_string())
                .filter(|text| !text.trim().is_empty()),
            freeform: attributes.boolean("human.freeform").unwrap_or(false),
        }
    }
}
