//! Which handler runs a node, and the DOT spellings of each kind in one place: canonical type
//! names, accepted aliases, and the shapes that imply them.

use std::fmt;

/// A handler type. The graph lends custom names (`HandlerType<&str>`, borrowed from the node's
/// `type`); run records own them (`HandlerType<String>`), and read and write them as the type's
/// canonical name, so records hold exactly what `name()` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HandlerType<S> {
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
    Custom(S),
}

/// A built-in handler type: its canonical name, accepted aliases, and the shapes that imply it.
type BuiltIn = (HandlerType<&'static str>, &'static str, &'static [&'static str], &'static [&'static str]);

/// Built-in handler types: canonical name, accepted aliases, and the shapes that imply it (the
/// first is the one fabro writes; `circle` and `doublecircle` are how kilroy draws a start and an
/// exit).
const BUILT_INS: &[BuiltIn] = &[
    (HandlerType::Start, "start", &[], &["Mdiamond", "circle"]),
    (HandlerType::Exit, "exit", &[], &["Msquare", "doublecircle"]),
    (HandlerType::Agent, "agent", &["codergen"], &["box"]),
    (HandlerType::Prompt, "prompt", &[], &["tab"]),
    (HandlerType::Human, "human", &["wait.human"], &["hexagon"]),
    (HandlerType::Conditional, "conditional", &[], &["diamond"]),
    (HandlerType::Parallel, "parallel", &[], &["component"]),
    (HandlerType::FanIn, "fan_in", &["parallel.fan_in"], &["tripleoctagon"]),
    (HandlerType::Command, "command", &["tool", "script"], &["parallelogram"]),
    (HandlerType::Wait, "wait", &[], &["insulator"]),
    (HandlerType::Manager, "manager", &["stack.manager_loop"], &["house"]),
];

impl<'a> HandlerType<&'a str> {
    /// Reads an explicit `type` value: a canonical name or alias, else a custom type.
    pub fn from_type_name(name: &'a str) -> HandlerType<&'a str> {
        BUILT_INS
            .iter()
            .find(|(_, canonical, aliases, _)| *canonical == name || aliases.contains(&name))
            .map_or(HandlerType::Custom(name), |(kind, ..)| *kind)
    }

    /// The handler a Graphviz shape implies, if the shape has one.
    pub fn from_shape(shape: &str) -> Option<HandlerType<&'static str>> {
        BUILT_INS.iter().find(|(.., shapes)| shapes.contains(&shape)).map(|(kind, ..)| *kind)
    }
}

impl HandlerType<&'static str> {
    /// Every built-in canonical type name and alias, for suggestions.
    pub fn known_names() -> impl Iterator<Item = &'static str> {
        BUILT_INS
            .iter()
            .flat_map(|(_, canonical, aliases, _)| std::iter::once(*canonical).chain(aliases.iter().copied()))
    }

    /// Every shape with a handler, for suggestions.
    pub fn known_shapes() -> impl Iterator<Item = &'static str> {
        BUILT_INS.iter().flat_map(|(.., shapes)| shapes.iter().copied())
    }
}

impl<'a> HandlerType<&'a str> {
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

    /// The owned form, for records that outlive the workflow graph.
    pub fn into_owned(self) -> HandlerType<String> {
        self.map_name(|name| name.to_string())
    }
}

impl<S> HandlerType<S> {
    /// The same handler type, a custom one's name converted by `f`.
    fn map_name<'a, T>(&'a self, f: impl FnOnce(&'a S) -> T) -> HandlerType<T> {
        match self {
            HandlerType::Start => HandlerType::Start,
            HandlerType::Exit => HandlerType::Exit,
            HandlerType::Agent => HandlerType::Agent,
            HandlerType::Prompt => HandlerType::Prompt,
            HandlerType::Human => HandlerType::Human,
            HandlerType::Conditional => HandlerType::Conditional,
            HandlerType::Parallel => HandlerType::Parallel,
            HandlerType::FanIn => HandlerType::FanIn,
            HandlerType::Command => HandlerType::Command,
            HandlerType::Wait => HandlerType::Wait,
            HandlerType::Manager => HandlerType::Manager,
            HandlerType::Custom(name) => HandlerType::Custom(f(name)),
        }
    }
}

impl HandlerType<String> {
    /// The borrowed form, to ask what the graph's handler types answer.
    pub fn as_borrowed(&self) -> HandlerType<&str> {
        self.map_name(String::as_str)
    }

    pub fn name(&self) -> &str {
        self.as_borrowed().name()
    }
}

/// Reads a recorded name: canonical names and aliases become built-in types, anything else (a
/// type registered with `Loader::with_handler_type`) a custom one, kept as written.
impl From<String> for HandlerType<String> {
    fn from(name: String) -> HandlerType<String> {
        match HandlerType::from_type_name(&name) {
            HandlerType::Custom(_) => HandlerType::Custom(name),
            built_in => built_in.into_owned(),
        }
    }
}

impl From<&str> for HandlerType<String> {
    fn from(name: &str) -> HandlerType<String> {
        HandlerType::from_type_name(name).into_owned()
    }
}

impl fmt::Display for HandlerType<&str> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for HandlerType<String> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Written as the canonical name (`agent`, never `codergen`), as run records always held it.
impl serde::Serialize for HandlerType<String> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for HandlerType<String> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <String as serde::Deserialize>::deserialize(deserializer).map(HandlerType::from)
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
        assert_eq!(HandlerType::from_shape("doublecircle"), Some(HandlerType::Exit));
        assert_eq!(HandlerType::from_shape("circle"), Some(HandlerType::Start));
        assert_eq!(HandlerType::FanIn.name(), "fan_in");
    }

    #[test]
    fn owned_types_are_written_by_canonical_name_and_read_back_from_any_spelling() {
        for name in HandlerType::known_names().chain(["deploy", "my.handler"]) {
            let owned = HandlerType::from(name);
            assert_eq!(owned.as_borrowed(), HandlerType::from_type_name(name));
            let json = serde_json::to_string(&owned).unwrap();
            assert_eq!(json, format!("\"{}\"", HandlerType::from_type_name(name).name()));
            assert_eq!(serde_json::from_str::<HandlerType<String>>(&json).unwrap(), owned);
        }
        assert_eq!(HandlerType::from("codergen".to_string()), HandlerType::Agent);
        assert_eq!(HandlerType::from("deploy".to_string()), HandlerType::Custom("deploy".to_string()));
        assert_eq!(HandlerType::Custom("deploy").into_owned().to_string(), "deploy");
    }
}
