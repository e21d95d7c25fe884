//! Devcontainers (`devcontainer=true`, or a path): the container of a stage described by the
//! project's `.devcontainer/devcontainer.json`, as editors read it: `image`, or
//! `build.dockerfile` with `build.context` (an image fabro builds, tagged by the Dockerfile's
//! digest so that an unchanged Dockerfile is built once), `containerEnv`, `remoteUser` and
//! `postCreateCommand`. Other keys are ignored.
//!
//! The file is read once per fabro process (by the check before the run), so a stage that
//! rewrites it cannot change how later stages' containers are made.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use sha2::Digest;

/// The file `devcontainer=true` reads, relative to the work directory.
pub const DEFAULT_PATH: &str = ".devcontainer/devcontainer.json";
/// The repository of the images fabro builds; the tag is the Dockerfile's digest.
pub const BUILT_IMAGE: &str = "localhost/fabro-devcontainer";

/// A devcontainer, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Devcontainer {
    /// The `devcontainer.json` it was read from.
    pub path: PathBuf,
    pub image: DevImage,
    /// `containerEnv`.
    pub env: BTreeMap<String, String>,
    /// `remoteUser` (else `containerUser`): who programs run as.
    pub user: Option<String>,
    /// `postCreateCommand`, as the program and its arguments.
    pub post_create: Option<Vec<String>>,
}

/// Where a devcontainer's image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DevImage {
    /// `image`.
    Named(String),
    /// `build`: fabro builds `tag` from `dockerfile` in `context`.
    Built { dockerfile: PathBuf, context: PathBuf, tag: String },
}

impl Devcontainer {
    /// The image its containers start from.
    pub fn image_name(&self) -> &str {
        match &self.image {
            DevImage::Named(name) => name,
            DevImage::Built { tag, .. } => tag,
        }
    }
}

/// Why a devcontainer cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("devcontainer {}: {message}", path.display())]
pub struct DevcontainerError {
    pub path: PathBuf,
    pub message: String,
}

/// The devcontainers read by this process, by the path of their file.
static READ: Mutex<BTreeMap<PathBuf, Devcontainer>> = Mutex::new(BTreeMap::new());

/// The devcontainer `written` (`true`, a `devcontainer.json` or the directory holding one,
/// relative to `work_dir`) names, read the first time this process asks for it.
pub fn load(work_dir: &Path, written: &str) -> Result<Devcontainer, DevcontainerError> {
    let mut path = work_dir.join(if written.trim() == "true" { DEFAULT_PATH } else { written.trim() });
    if path.is_dir() {
        path = path.join("devcontainer.json");
    }
    let path = std::path::absolute(&path).unwrap_or(path);
    if let Some(known) = READ.lock().unwrap_or_else(PoisonError::into_inner).get(&path) {
        return Ok(known.clone());
    }
    let read = read(&path)?;
    READ.lock().unwrap_or_else(PoisonError::into_inner).insert(path, read.clone());
    Ok(read)
}

fn read(path: &Path) -> Result<Devcontainer, DevcontainerError> {
    let error = |message: String| DevcontainerError { path: path.to_path_buf(), message };
    let text = crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Record)
        .map_err(|io| error(format!("cannot be read: {io}")))?;
    let value: serde_json::Value =
        serde_json::from_str(&strip_jsonc(&text)).map_err(|json| error(format!("is not JSON: {json}")))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let text_at = |key: &str| value.get(key).and_then(serde_json::Value::as_str).map(str::to_string);
    let image = if let Some(image) = text_at("image") {
        DevImage::Named(image)
    } else {
        let build = value.get("build");
        let field = |key: &str, legacy: &str| {
            build
                .and_then(|build| build.get(key))
                .or_else(|| value.get(legacy))
                .and_then(serde_json::Value::as_str)
                .map(str::to_string)
        };
        let Some(dockerfile) = field("dockerfile", "dockerFile") else {
            return Err(error("names neither `image` nor `build.dockerfile`".into()));
        };
        let dockerfile = dir.join(dockerfile);
        let context = dir.join(field("context", "context").unwrap_or_else(|| ".".into()));
        let contents = crate::regular_file::read(&dockerfile, crate::regular_file::FileKind::Record)
            .map_err(|io| error(format!("its Dockerfile {} cannot be read: {io}", dockerfile.display())))?;
        let digest = sha2::Sha256::digest(&contents);
        let hex: String = digest.iter().take(12).map(|byte| format!("{byte:02x}")).collect();
        DevImage::Built { dockerfile, context, tag: format!("{BUILT_IMAGE}:{hex}") }
    };
    let mut env = BTreeMap::new();
    if let Some(object) = value.get("containerEnv").and_then(serde_json::Value::as_object) {
        for (name, value) in object {
            let Some(value) = value.as_str() else {
                return Err(error(format!("containerEnv.{name} is not a string")));
            };
            env.insert(name.clone(), value.to_string());
        }
    }
    let post_create = match value.get("postCreateCommand") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(line)) => Some(vec!["sh".into(), "-c".into(), line.clone()]),
        Some(serde_json::Value::Array(items)) => Some(
            items
                .iter()
                .map(|item| item.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .filter(|argv| !argv.is_empty())
                .ok_or_else(|| error("postCreateCommand should be a string or a list of strings".into()))?,
        ),
        Some(_) => return Err(error("postCreateCommand should be a string or a list of strings (fabro runs no parallel commands object)".into())),
    };
    Ok(Devcontainer {
        path: path.to_path_buf(),
        image,
        env,
        user: text_at("remoteUser").or_else(|| text_at("containerUser")),
        post_create,
    })
}

/// JSON with comments (`//`, `/* */`) and trailing commas, as `devcontainer.json` is written,
/// made plain JSON.
fn strip_jsonc(text: &str) -> String {
    drop_trailing_commas(&strip_comments(text))
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => out.extend(chars.next()),
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('/', Some('/')) => {
                for skipped in chars.by_ref() {
                    if skipped == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for skipped in chars.by_ref() {
                    if last == '*' && skipped == '/' {
                        break;
                    }
                    last = skipped;
                }
                out.push(' ');
            }
            _ => {
                in_string = c == '"';
                out.push(c);
            }
        }
    }
    out
}

/// Drops each comma outside strings that only blanks separate from a `}` or `]`.
fn drop_trailing_commas(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        if in_string {
            in_string = escaped || c != '"';
            escaped = !escaped && c == '\\';
        } else if c == '"' {
            in_string = true;
        } else if c == ',' && matches!(text[at + 1..].trim_start().chars().next(), Some('}' | ']')) {
            continue;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_trailing_commas_are_read() {
        let text = "{\n  // the image\n  \"image\": \"a//b\", /* x */\n  \"list\": [1, 2,],\n}\n";
        let value: serde_json::Value = serde_json::from_str(&strip_jsonc(text)).unwrap();
        assert_eq!(value["image"], "a//b");
        assert_eq!(value["list"], serde_json::json!([1, 2]));
    }

    #[test]
    fn a_build_is_tagged_by_its_dockerfiles_digest() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join(".devcontainer");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Dockerfile"), "FROM debian:12\n").unwrap();
        std::fs::write(
            dir.join("devcontainer.json"),
            r#"{ "build": { "dockerfile": "Dockerfile", "context": ".." }, "containerEnv": { "A": "1" },
                "remoteUser": "dev", "postCreateCommand": "make setup", }"#,
        )
        .unwrap();
        let read = load(temp.path(), "true").unwrap();
        let DevImage::Built { dockerfile, context, tag } = &read.image else { panic!("{read:?}") };
        assert_eq!((dockerfile, context), (&dir.join("Dockerfile"), &dir.join("..")));
        assert!(
            tag.starts_with("localhost/fabro-devcontainer:") && tag.len() == BUILT_IMAGE.len() + 25,
            "{tag}"
        );
        assert_eq!(read.env["A"], "1");
        assert_eq!(read.user.as_deref(), Some("dev"));
        assert_eq!(read.post_create, Some(vec!["sh".into(), "-c".into(), "make setup".into()]));
        std::fs::write(dir.join("other.json"), r#"{ "postCreateCommand": {"a": "x"}, "image": "x" }"#)
            .unwrap();
        let error = load(temp.path(), ".devcontainer/other.json").unwrap_err();
        assert!(error.to_string().contains("postCreateCommand should be"), "{error}");
    }
}
