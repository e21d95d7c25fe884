//! What every request to `fabro serve` passes before a page: the host it names, where a
//! state-changing request comes from, the token; and the security headers of every response.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{AppState, LocalAddr};

const TOKEN_COOKIE: &str = "fabro_token";

/// Scripts and styles only from the server's own files (no inline script, so markup a stage
/// smuggled into a page cannot run), no framing, forms posted only back to the server.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Sets the security headers on every response, refusals included.
pub async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // Same-origin: the server's own form posts keep their Origin (no-referrer would make it `null`).
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    response
}

/// A refusal: plain text for the pages, the API's JSON error (`{"error": {"code", "message"}}`)
/// under `/api/`.
fn refused(status: StatusCode, code: &'static str, why: &str, api: bool) -> Response {
    match api {
        true => super::api::error(status, code, why.trim()),
        false => (status, format!("{why}\n")).into_response(),
    }
}

/// Refuses a request whose `Host` is not a name of this server (a page of another site reaching
/// it through DNS rebinding), and a state-changing request (anything but GET and HEAD) that does
/// not come from one of its own pages: its `Origin`, or without one its `Referer`, must be this
/// server.
pub async fn same_origin(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let api = request.uri().path().starts_with("/api/");
    let forbidden = |why: &str| refused(StatusCode::FORBIDDEN, "forbidden", why, api);
    let Some(LocalAddr(local)) = request.extensions().get::<LocalAddr>().copied() else {
        return forbidden("the request came in on no known connection");
    };
    let host = request.headers().get(header::HOST).and_then(|value| value.to_str().ok()).unwrap_or("");
    if !host_allowed(host, local, state.options.host_name.as_deref()) {
        return forbidden(&format!(
            "refused: `{host}` is not a host name this server serves; open the URL `fabro serve` printed"
        ));
    }
    let api_call = api && is_api_client(request.headers());
    if !matches!(*request.method(), Method::GET | Method::HEAD)
        && !api_call
        && !from_own_page(request.headers(), host)
    {
        return forbidden(
            "refused: a request that changes anything must come from a page of this server (its Origin or \
             Referer header names another site, or neither is sent); a program calling /api/v1 sends \
             `Content-Type: application/json` and no Origin",
        );
    }
    next.run(request).await
}

/// A program calling the API (a script, CI, `curl`): no `Origin` (browsers send one with every
/// cross-site request that changes anything) and a JSON body, which a page of another site cannot
/// send without a preflight this server never answers.
fn is_api_client(headers: &HeaderMap) -> bool {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim().to_ascii_lowercase().starts_with("application/json"));
    json && !headers.contains_key(header::ORIGIN)
}

/// Whether `host` (a `Host` header: name and port) names the server reached at `local`: its
/// address, `localhost`, `127.0.0.1`, `[::1]` or `extra`, with its port (which may be left out
/// only when it is 80).
fn host_allowed(host: &str, local: std::net::SocketAddr, extra: Option<&str>) -> bool {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((inside, after)) => (format!("[{inside}]"), after.strip_prefix(':')),
            None => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) => (name.to_string(), Some(port)),
            None => (host.to_string(), None),
        },
    };
    let port_matches = match port {
        Some(port) => port.parse::<u16>().ok() == Some(local.port()),
        None => local.port() == 80,
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let address = match local.ip() {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => format!("[{v6}]"),
        },
    };
    let extra = extra.map(|name| name.trim_end_matches('.').to_ascii_lowercase());
    port_matches
        && (["localhost", "127.0.0.1", "[::1]"].contains(&name.as_str())
            || name == address
            || extra.as_deref() == Some(name.as_str()))
}

/// Whether the request's `Origin` is this server (`http://HOST`), or without an `Origin` its
/// `Referer` is a page of it.
fn from_own_page(headers: &HeaderMap, host: &str) -> bool {
    let own = format!("http://{host}");
    let text = |name| headers.get(name).and_then(|value: &HeaderValue| value.to_str().ok());
    match (text(header::ORIGIN), text(header::REFERER)) {
        (Some(origin), _) => origin.eq_ignore_ascii_case(&own),
        (None, Some(referer)) => {
            referer.get(..own.len()).is_some_and(|start| start.eq_ignore_ascii_case(&own))
                && referer[own.len()..].starts_with('/')
        }
        (None, None) => false,
    }
}

/// With a token set: the request must carry it as `?token=` (percent-encoded) or in the cookie
/// the first such request sets.
pub async fn require_token(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let Some(token) = &state.options.token else { return next.run(request).await };
    let in_query = request
        .uri()
        .query()
        .into_iter()
        .flat_map(|query| query.split('&'))
        .filter_map(|pair| pair.strip_prefix("token="))
        .any(|value| percent_decode(value).as_deref() == Some(token.as_str()));
    let in_cookie = request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|cookies| cookies.split(';'))
        .filter_map(|cookie| cookie.trim().strip_prefix(&format!("{TOKEN_COOKIE}=")))
        .any(|value| percent_decode(value).as_deref() == Some(token.as_str()));
    // Programs calling the API: `Authorization: Bearer TOKEN`.
    let in_header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .is_some_and(|value| value.trim() == token);
    if !in_query && !in_cookie && !in_header {
        let why = "a valid token is required: open the URL `fabro serve` printed, or send `Authorization: Bearer TOKEN`";
        return refused(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            why,
            request.uri().path().starts_with("/api/"),
        );
    }
    let mut response = next.run(request).await;
    if in_query {
        let cookie = format!("{TOKEN_COOKIE}={}; Path=/; HttpOnly; SameSite=Strict", percent_encode(token));
        if let Ok(value) = cookie.parse() {
            response.headers_mut().insert(header::SET_COOKIE, value);
        }
    }
    response
}

/// `text` with every byte but ASCII letters, digits and `-._~` written as `%XX`: safe in a URL's
/// query and in a cookie value.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The text `%XX` escapes (and `+` for a space, as forms write it) stand for; `None` when an
/// escape is malformed or the bytes are not UTF-8.
pub fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(at + 1..at + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                at += 3;
            }
            b'+' => {
                out.push(b' ');
                at += 1;
            }
            byte => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_survive_percent_encoding() {
        for token in ["s3cret", "a&b c", "100%+x=y;z", "ünï"] {
            assert_eq!(percent_decode(&percent_encode(token)).as_deref(), Some(token));
        }
        assert_eq!(percent_encode("a&b c"), "a%26b%20c");
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%2"), None);
    }

    #[test]
    fn only_the_servers_own_names_and_port_are_hosts() {
        let local: std::net::SocketAddr = "127.0.0.1:8080".parse().unwrap();
        for host in ["127.0.0.1:8080", "localhost:8080", "LOCALHOST:8080", "[::1]:8080", "box.lan:8080"] {
            assert!(host_allowed(host, local, Some("box.lan")), "{host}");
        }
        for host in ["evil.example:8080", "127.0.0.1:8081", "127.0.0.1", "", "[::1", "localhost:x"] {
            assert!(!host_allowed(host, local, Some("box.lan")), "{host}");
        }
        let any: std::net::SocketAddr = "192.168.1.5:80".parse().unwrap();
        assert!(host_allowed("192.168.1.5", any, None));
        assert!(!host_allowed("10.0.0.1", any, None));
    }

    #[test]
    fn state_changes_come_from_the_servers_own_pages() {
        let with = |pairs: &[(header::HeaderName, &str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(name, HeaderValue::from_str(value).unwrap());
            }
            headers
        };
        let host = "127.0.0.1:8080";
        assert!(from_own_page(&with(&[(header::ORIGIN, "http://127.0.0.1:8080")]), host));
        assert!(from_own_page(&with(&[(header::REFERER, "http://127.0.0.1:8080/runs/x")]), host));
        assert!(!from_own_page(&with(&[(header::ORIGIN, "http://evil.example")]), host));
        assert!(!from_own_page(&with(&[(header::ORIGIN, "null")]), host));
        assert!(!from_own_page(&with(&[(header::REFERER, "http://127.0.0.1:80801/")]), host));
        assert!(!from_own_page(&HeaderMap::new(), host));
    }
}
