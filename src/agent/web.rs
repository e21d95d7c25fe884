//! The web tools of agent stages, `web_fetch` ([`super::web_fetch`]) and `web_search`
//! ([`super::web_search`]): which a stage may have, and running their calls.
//!
//! Both are built-in tools, offered to every model family when the stage may use them: its
//! `web_tools` is not false, its sandbox has a network (no sandbox, or `sandbox_network=true`:
//! fabro makes the requests itself, and must not reach what the stage's own programs cannot), and
//! for `web_search` a search provider is configured. Both need `permissions=full`
//! ([`super::permissions::needed_for`]). The run's secrets are never sent: a URL or query holding
//! one is refused.

use serde_json::Value;

use super::web_search::SearchProvider;
use crate::graph::settings::SandboxKind;
use crate::sandbox::Confinement;

pub const WEB_FETCH: &str = "web_fetch";
pub const WEB_SEARCH: &str = "web_search";
/// The web tools, as [`super::tools::BUILTIN_TOOLS`] lists them.
pub const WEB_TOOLS: [&str; 2] = [WEB_FETCH, WEB_SEARCH];

/// A run's web access: one HTTP client for every stage's web tools, and the search provider.
#[derive(Clone)]
pub struct Web {
    client: reqwest::Client,
    search: Option<SearchProvider>,
}

/// Why a stage does not get a web tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withheld {
    /// `web_tools=false` (node, graph or config file).
    TurnedOff,
    /// The stage's sandbox has no network.
    NoNetwork,
    /// `web_search` with no search provider configured.
    NoSearchProvider,
}

impl Withheld {
    /// Why, in words.
    pub fn reason(self) -> &'static str {
        match self {
            Withheld::TurnedOff => "web_tools=false",
            Withheld::NoNetwork => {
                "the stage's sandbox (bwrap) has no network; sandbox_network=true gives it one"
            }
            Withheld::NoSearchProvider => {
                "no search provider is configured (BRAVE_API_KEY, or the config file's [web_search])"
            }
        }
    }
}

impl Web {
    /// Web access through `search` (none: no `web_search`).
    pub fn new(search: Option<SearchProvider>) -> Result<Web, reqwest::Error> {
        Ok(Web { client: super::web_fetch::client()?, search })
    }

    /// The configured search provider.
    pub fn search_provider(&self) -> Option<&SearchProvider> {
        self.search.as_ref()
    }

    /// Whether a stage whose `web_tools` is `on`, confined by `confinement`, may have web tool
    /// `tool` (any other tool is not this module's to withhold).
    pub fn allows(&self, tool: &str, on: bool, confinement: &Confinement) -> Result<(), Withheld> {
        if !WEB_TOOLS.contains(&tool) {
            return Ok(());
        }
        if !on {
            return Err(Withheld::TurnedOff);
        }
        if confinement.kind != SandboxKind::None && !confinement.network {
            return Err(Withheld::NoNetwork);
        }
        if tool == WEB_SEARCH && self.search.is_none() {
            return Err(Withheld::NoSearchProvider);
        }
        Ok(())
    }

    /// Runs a `web_fetch` call: the page (an error result when the server answered with an
    /// error status), or why there is none.
    pub async fn fetch(&self, arguments: &Value) -> Result<String, String> {
        let url = arguments["url"].as_str().ok_or("missing string argument `url`")?;
        let page = super::web_fetch::fetch(&self.client, url, &crate::secrets::values())
            .await
            .map_err(|error| error.to_string())?;
        match page.is_success() {
            true => Ok(page.render()),
            false => Err(page.render()),
        }
    }

    /// Runs a `web_search` call: the numbered results, or why there are none.
    pub async fn search(&self, arguments: &Value) -> Result<String, String> {
        let provider = self.search.as_ref().ok_or_else(|| Withheld::NoSearchProvider.reason().to_string())?;
        let query = arguments["query"].as_str().ok_or("missing string argument `query`")?;
        let count = arguments["count"].as_u64().map(|count| count.min(u64::from(u8::MAX)) as u8);
        let results = provider
            .search(&self.client, query, count, &crate::secrets::values())
            .await
            .map_err(|error| format!("web_search: {error}"))?;
        Ok(super::web_search::render(query, provider.kind, &results))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_tools_need_a_network_and_search_a_provider() {
        let bare = Web::new(None).unwrap();
        let open = Confinement::default();
        let closed = Confinement { kind: SandboxKind::Bwrap, ..Confinement::default() };
        let networked = Confinement { kind: SandboxKind::Bwrap, network: true, ..Confinement::default() };
        assert_eq!(bare.allows(WEB_FETCH, true, &open), Ok(()));
        assert_eq!(bare.allows(WEB_FETCH, true, &networked), Ok(()));
        assert_eq!(bare.allows(WEB_FETCH, true, &closed), Err(Withheld::NoNetwork));
        assert_eq!(bare.allows(WEB_FETCH, false, &open), Err(Withheld::TurnedOff));
        assert_eq!(bare.allows(WEB_SEARCH, true, &open), Err(Withheld::NoSearchProvider));
        assert_eq!(bare.allows("shell", false, &closed), Ok(()));
        let provider = SearchProvider {
            kind: super::super::web_search::SearchKind::Brave,
            endpoint: "http://127.0.0.1:9/".into(),
            api_key: None,
            count: 3,
        };
        let searching = Web::new(Some(provider)).unwrap();
        assert_eq!(searching.allows(WEB_SEARCH, true, &open), Ok(()));
        assert_eq!(searching.allows(WEB_SEARCH, true, &closed), Err(Withheld::NoNetwork));
    }
}
