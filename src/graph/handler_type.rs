//! Which handler runs a node, and the DOT spellings of each kind in one place: canonical type
//! names, accepted aliases, and the shapes that imply them.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HandlerType<'a> {
    Start,
    Exit,
    /// A tool-using LLM stage (`box`, the default).
    Agent,
    /// A single LLM call (`tab`).
    Prompt,
    /// A human approval gate (`hexagon`).
    Human,
    /// Routing only (`diamond`).
    Conditional,
    /// Fan-out (`component`).
    Parallel,
    /// Fan-in (`tripleoctagon`).
    FanIn,
    /// A shell command (`parallelogram`).
    Command,
    /// A timed pause (`insulator`).
    Wait,
    /// A supervised sub-workflow (`house`).
    Manager,
    /// A `type` no built-in handler has: a custom handler must be registered for it.
    Custom(&'a str),
}

/// Built-in handler types: canonical name, accepted aliases, and the shape that implies it.
const BUILT_INS: &[(HandlerType<'static>, &str, &[&str], &str)] = &[
    (HandlerType::Start, "start", &[], "Mdiamond"),
    (HandlerType::Exit, "exit", &[], "Msquare"),
    (HandlerType::Agent, "agent", &["codergen"], "box"),
    (HandlerType::Prompt, "prompt", &[], "tab"),
    (HandlerType::Human, "human", &["wait.human"], "hexagon"),
    (HandlerType::Conditional, "conditional", &[], "diamond"),
    (HandlerType::Parallel, "parallel", &[], "component"),
    (HandlerType::FanIn, "fan_in", &["parallel.fan_in"], "tripleoctagon"),
    (HandlerType::Command, "command", &["tool", "script"], "parallelogram"),
    (HandlerType::Wait, "wait", &[], "insulator"),
    (HandlerType::Manager, "manager", &["stack.manager_loop"], "house"),
];

impl<'a> HandlerType<'a> {
    /// Reads an explicit `type` value: a canonical name or alias, else a custom type.
    pub fn from_type_name(name: &'a str) -> HandlerType<'a> {
        BUILT_INS
            .iter()
            .find(|(_, canonical, aliases, _)| *canonical == name || aliases.contains(&name))
            .map_or(HandlerType::Custom(name), |(kind, ..)| *kind)
    }

    /// The handler a Graphviz shape implies, if the shape has one.
    pub fn from_shape(shape: &str) -> Option<HandlerType<'static>> {
        BUILT_INS.iter().find(|(.., s)| *s == shape).map(|(kind, ..)| *kind)
    }
}

impl HandlerType<'static> {
    /// Every built-in canonical type name and alias, for suggestions.
    pub fn known_names() -> impl Iterator<Item = &'static str> {
        BUILT_INS
            .iter()
            .flat_map(|(_, canonical, aliases, _)| std::iter::once(*canonical).chain(aliases.iter().copied()))
    }

    /// Every shape with a handler, for suggestions.
    pub fn known_shapes() -> impl Iterator<Item = &'static str> {
        BUILT_INS.iter().map(|(.., shape)| *shape)
    }
}

impl<'a> HandlerType<'a> {
    pub fn name(self) -> &'a str {
        match self {
            HandlerType::Custom(name) => name,
            builtin => {
                BUILT_INS.iter().find(|(kind, ..)| *kind == builtin).map_or("agent", |(_, name, ..)| name)
            }
        }
    }

    /// Stages that call an LLM and so want a prompt.
    pub fn is_llm(self) -> bool {
        matches!(self, HandlerType::Agent | HandlerType::Prompt)
    }

    /// Stages that are given the run so far as a preamble: LLM stages, and managers, which pass
    /// theirs on to their child run.
    pub fn receives_preamble(self) -> bool {
        self.is_llm() || self == HandlerType::Manager
    }
}

impl fmt::Display for HandlerType<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_and_shapes_map_to_one_type() {
        assert_eq!(HandlerType::from_type_name("codergen"), HandlerType::Agent);
        assert_eq!(HandlerType::from_type_name("wait.human"), HandlerType::Human);
        assert_eq!(HandlerType::from_type_name("tool"), HandlerType::Command);
        assert_eq!(HandlerType::from_type_name("parallel.fan_in"), HandlerType::FanIn);
        assert_eq!(HandlerType::from_type_name("stack.manager_loop"), HandlerType::Manager);
        assert_eq!(HandlerType::from_type_name("mine"), HandlerType::Custom("mine"));
        assert_eq!(HandlerType::from_shape("insulator"), Some(HandlerType::Wait));
        assert_eq!(HandlerType::from_shape("ellipse"), None);
        assert_eq!(HandlerType::FanIn.name(), "fan_in");
    }
}
