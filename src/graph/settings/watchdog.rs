//! What an agent stage's watchdog does when the model repeats the same tool call (`watchdog=`).

/// What the watchdog does when the same call repeats (`watchdog=` on the node).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WatchdogMode {
    /// Emit `agent.watchdog` once per pattern and tell the model (the default).
    #[default]
    Warn,
    /// Do nothing.
    Off,
    /// Fail the stage, naming the repeated call.
    Stop,
}

impl WatchdogMode {
    pub const NAMES: &'static [&'static str] = &["warn", "off", "stop"];

    pub fn from_name(name: &str) -> Option<WatchdogMode> {
        match name {
            "warn" => Some(WatchdogMode::Warn),
            "off" => Some(WatchdogMode::Off),
            "stop" => Some(WatchdogMode::Stop),
            _ => None,
        }
    }
}
