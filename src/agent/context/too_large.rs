//! What a provider's "too large" answer says about its limits: the context window it states, and
//! how many tokens it counted in what was sent. Servers word these differently; each reading
//! below names the servers that use it. A message that states neither gives `None`.

use regex::Regex;
use std::sync::LazyLock;

/// The context window a rejection states, in tokens.
pub fn stated_window(message: &str) -> Option<u64> {
    static WORDINGS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        compiled(&[
            // OpenAI, vLLM, llama-cpp-python, LiteLLM: "maximum context length is 2048 tokens".
            r"(?i)maximum context length is (\d+)",
            // llama-cpp-python's own: "Requested tokens (1500) exceed context window of 1280".
            r"(?i)exceeds? (?:the )?context window of (\d+)",
            // Anthropic: "prompt is too long: 210000 tokens > 200000 maximum".
            r"(?i)prompt is too long: \d+ tokens > (\d+) maximum",
            // LM Studio: "the model is loaded with context length of only 2048 tokens".
            r"(?i)context length of only (\d+)",
            // llama.cpp's server (its error body): "n_ctx": 4096, as the error says it: n_ctx=4096.
            r#"n_ctx"?\s*[:=]\s*(\d+)"#,
        ])
    });
    first_number(&WORDINGS, message)
}

/// The tokens a rejection says the sent messages came to (without the output asked for).
pub fn stated_prompt_tokens(message: &str) -> Option<u64> {
    static WORDINGS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        compiled(&[
            // OpenAI-style (vLLM, llama-cpp-python): "(1500 in the messages, 200 in the completion)".
            r"(?i)\((\d+) in the messages",
            // vLLM: "However, your request has 2100 input tokens".
            r"(?i)your request has (\d+) input tokens",
            r"(?i)Requested tokens \((\d+)\)",
            r"(?i)prompt is too long: (\d+) tokens",
            r#"n_prompt_tokens"?\s*[:=]\s*(\d+)"#,
        ])
    });
    first_number(&WORDINGS, message)
}

/// The wordings, compiled (each a fixed pattern of this file).
fn compiled(patterns: &[&str]) -> Vec<Regex> {
    patterns.iter().map(|pattern| Regex::new(pattern).expect("a valid pattern")).collect()
}

/// The number the first matching wording captures (a positive one).
fn first_number(wordings: &[Regex], message: &str) -> Option<u64> {
    wordings
        .iter()
        .find_map(|wording| wording.captures(message)?.get(1)?.as_str().parse().ok())
        .filter(|number| *number > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_servers_wording_is_read() {
        let llama_cpp_python =
            "http://127.0.0.1:1/v1/chat/completions answered HTTP 400: This model's maximum \
            context length is 1280 tokens. However, you requested 1720 tokens (1520 in the messages, 200 in \
            the completion). Please reduce the length of the messages or completion.";
        assert_eq!(stated_window(llama_cpp_python), Some(1280));
        assert_eq!(stated_prompt_tokens(llama_cpp_python), Some(1520));
        let vllm = "This model's maximum context length is 2048 tokens. However, your request has 2100 input tokens.";
        assert_eq!((stated_window(vllm), stated_prompt_tokens(vllm)), (Some(2048), Some(2100)));
        let raw = "Requested tokens (1500) exceed context window of 1280";
        assert_eq!((stated_window(raw), stated_prompt_tokens(raw)), (Some(1280), Some(1500)));
        let anthropic = "prompt is too long: 210000 tokens > 200000 maximum";
        assert_eq!(
            (stated_window(anthropic), stated_prompt_tokens(anthropic)),
            (Some(200_000), Some(210_000))
        );
        let lm_studio = "the model is loaded with context length of only 4096 tokens";
        assert_eq!(stated_window(lm_studio), Some(4096));
        let llama_cpp = r#"{"error":{"code":400,"type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}"#;
        assert_eq!((stated_window(llama_cpp), stated_prompt_tokens(llama_cpp)), (Some(4096), Some(5000)));
        let as_reported = "the request exceeds the available context size (n_prompt_tokens=5000, n_ctx=4096)";
        assert_eq!((stated_window(as_reported), stated_prompt_tokens(as_reported)), (Some(4096), Some(5000)));
        assert_eq!(stated_window("request too large"), None);
    }
}
