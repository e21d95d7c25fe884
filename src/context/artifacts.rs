//! The file-backed artifact store: context values too large to carry in the context itself.
//!
//! A value whose compact JSON is longer than a threshold (by default [`DEFAULT_THRESHOLD`],
//! 100 KiB; the graph attribute `artifact_threshold` overrides it) is written to
//!
//! ```text
//! <run_dir>/artifacts/values/<encoded key>.json
//! ```
//!
//! and the context keeps a *pointer* in its place: the JSON string `file://<absolute path>`,
//! whose path always ends in `/artifacts/values/<encoded key>.json` (see [`Pointer`] and
//! [`is_pointer`]).
//!
//! Keys are encoded by [`encode_key`] so that any UTF-8 key gives a distinct, harmless file name:
//! bytes other than `a-z`, `0-9`, `_` and `-` become `%XX` (upper-case hex). Upper-case letters are
//! escaped too, so that keys differing only in case do not share a file on case-insensitive file
//! systems. Names that would be long are shortened to a readable prefix plus the SHA-256 of the
//! whole key, and the key is then kept beside the value in `<name>.key`, so [`ArtifactStore::list`]
//! can still name it.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use super::Context;
use crate::atomic_file::{write_atomic_with, Durability};

/// The default offload threshold: values whose compact JSON is longer than this many bytes are
/// stored as files.
pub const DEFAULT_THRESHOLD: usize = 100 * 1024;

/// What every pointer starts with.
pub const POINTER_PREFIX: &str = "file://";

/// Encoded names longer than this are shortened (prefix + `~` + SHA-256).
const MAX_PLAIN_NAME: usize = 150;
/// How much of the encoded key a shortened name keeps.
const HASHED_PREFIX: usize = 80;
/// The encoding of the empty key: `%` alone is never produced for any other key.
const EMPTY_KEY_NAME: &str = "%";
/// Separates the readable prefix from the hash in shortened names; never produced otherwise
/// (`~` is escaped as `%7E`).
const HASH_SEPARATOR: char = '~';

#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("cannot serialize the value of context key {key:?}: {source}")]
    Serialize { key: String, source: serde_json::Error },
    #[error("cannot write the artifact for context key {key:?} to `{}`: {source}", path.display())]
    Write { key: String, path: PathBuf, source: std::io::Error },
    #[error("cannot read the artifact for context key {key:?} at `{}`: {source}", path.display())]
    Read { key: String, path: PathBuf, source: std::io::Error },
    #[error("cannot remove the artifact for context key {key:?} at `{}`: {source}", path.display())]
    Remove { key: String, path: PathBuf, source: std::io::Error },
    #[error("cannot list the artifact store `{}`: {source}", path.display())]
    List { path: PathBuf, source: std::io::Error },
    #[error("the artifact for context key {key:?} at `{}` is not valid JSON: {source}", path.display())]
    Corrupt { key: String, path: PathBuf, source: serde_json::Error },
    #[error("the artifact for context key {key:?} is missing: `{}` does not exist", path.display())]
    Missing { key: String, path: PathBuf },
    #[error("refusing pointer {pointer:?}: {reason} (artifact store `{}`)", root.display())]
    Refused { pointer: String, root: PathBuf, reason: &'static str },
    #[error("`{}` is a symbolic link; fabro does not read or write artifacts through links", path.display())]
    Symlink { path: PathBuf },
    #[error("the artifact path `{}` for context key {key:?} is not valid UTF-8, so it cannot be put in a `file://` pointer", path.display())]
    NonUtf8Path { key: String, path: PathBuf },
}

/// A reference to an offloaded value: the JSON string `file://<absolute path>`, where the path
/// ends in `/artifacts/values/<encoded key>.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    uri: String,
    path: PathBuf,
}

impl Pointer {
    /// Recognises a pointer by its shape alone (nothing is read): a string `file://` + an
    /// absolute path without `.`/`..` components, ending in `/artifacts/values/<name>.json` where
    /// `<name>` is something [`encode_key`] produces.
    pub fn parse(value: &Value) -> Option<Pointer> {
        let Value::String(text) = value else { return None };
        Pointer::parse_str(text)
    }

    /// [`Pointer::parse`] for the string itself.
    pub fn parse_str(text: &str) -> Option<Pointer> {
        let rest = text.strip_prefix(POINTER_PREFIX)?;
        if !rest.starts_with('/') || rest.contains('\0') || rest.contains("//") {
            return None;
        }
        let path = Path::new(rest);
        if !path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_))) {
            return None;
        }
        let stem = path.file_name()?.to_str()?.strip_suffix(".json")?;
        if !is_encoded_name(stem) {
            return None;
        }
        let values = path.parent()?;
        if values.file_name()? != "values" || values.parent()?.file_name()? != "artifacts" {
            return None;
        }
        Some(Pointer { uri: text.to_string(), path: path.to_path_buf() })
    }

    /// The pointer's text, `file://...`.
    pub fn as_str(&self) -> &str {
        &self.uri
    }

    /// The file the pointer names (not checked against any store).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The key the file name encodes, when it is not a shortened (hashed) name.
    pub fn key(&self) -> Option<String> {
        let stem = self.path.file_name()?.to_str()?.strip_suffix(".json")?;
        decode_key(stem)
    }

    /// The pointer as the JSON value to put in the context.
    pub fn to_value(&self) -> Value {
        Value::String(self.uri.clone())
    }
}

impl From<Pointer> for Value {
    fn from(pointer: Pointer) -> Value {
        Value::String(pointer.uri)
    }
}

impl std::fmt::Display for Pointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.uri)
    }
}

/// Whether `value` has the shape of an artifact pointer (see [`Pointer::parse`]).
pub fn is_pointer(value: &Value) -> bool {
    Pointer::parse(value).is_some()
}

/// One stored artifact, as [`ArtifactStore::list`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactInfo {
    pub key: String,
    /// Size of the file (the value's compact JSON).
    pub bytes: u64,
    pub path: PathBuf,
}

/// A context value that [`ArtifactStore::offload`] replaced by its pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offloaded {
    pub key: String,
    /// Size of the value's compact JSON, as written.
    pub bytes: u64,
    pub path: PathBuf,
}

fn is_plain_byte(byte: u8) -> bool {
    byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_' || byte == b'-'
}

fn is_windows_reserved(name: &str) -> bool {
    matches!(name, "con" | "prn" | "aux" | "nul")
        || (name.len() == 4
            && (name.starts_with("com") || name.starts_with("lpt"))
            && name.as_bytes()[3].is_ascii_digit()
            && name.as_bytes()[3] != b'0')
}

fn push_escaped(out: &mut String, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(byte >> 4)]));
    out.push(char::from(HEX[usize::from(byte & 0x0f)]));
}

/// The file name stem for `key` (without `.json`): every byte outside `a-z0-9_-` becomes `%XX`
/// (upper-case hex, so upper-case letters and `.` are escaped too), the empty key is `%`, a key
/// that would be a reserved Windows device name (`con`, `nul`, `com1`, ...) has its first byte
/// escaped, and names longer than 150 bytes become an 80-byte prefix, `~`, and the SHA-256 hex
/// of the whole key. The result never contains `/`, `\`, NUL or `.`, never starts with a dot,
/// and is at most 150 bytes, so `<name>.json` stays well under 200.
pub fn encode_key(key: &str) -> String {
    if key.is_empty() {
        return EMPTY_KEY_NAME.to_string();
    }
    let mut out = String::with_capacity(key.len());
    for (index, &byte) in key.as_bytes().iter().enumerate() {
        if is_plain_byte(byte) && !(index == 0 && is_windows_reserved(key)) {
            out.push(char::from(byte));
        } else {
            push_escaped(&mut out, byte);
        }
    }
    if out.len() <= MAX_PLAIN_NAME {
        return out;
    }
    // Cut at a boundary between encoded bytes, never inside a `%XX`.
    let mut cut = 0;
    let bytes = out.as_bytes();
    while cut < bytes.len() {
        let step = if bytes[cut] == b'%' { 3 } else { 1 };
        if cut + step > HASHED_PREFIX {
            break;
        }
        cut += step;
    }
    format!("{}{HASH_SEPARATOR}{}", &out[..cut], crate::source::sha256_hex(key))
}

/// The key an encoded name stands for, when the name is exactly what [`encode_key`] produces
/// for it; `None` for shortened (hashed) names and for anything `encode_key` never produces.
pub fn decode_key(name: &str) -> Option<String> {
    if name == EMPTY_KEY_NAME {
        return Some(String::new());
    }
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        if byte == b'%' {
            let hex = name.get(index + 1..index + 3)?;
            if !hex.bytes().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b)) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else if is_plain_byte(byte) {
            out.push(byte);
            index += 1;
        } else {
            return None;
        }
    }
    let key = String::from_utf8(out).ok()?;
    (encode_key(&key) == name).then_some(key)
}

/// Whether `name` is a shortened name: an encoded prefix, `~`, 64 lower-case hex digits.
fn is_hashed_name(name: &str) -> bool {
    let Some((prefix, hash)) = name.rsplit_once(HASH_SEPARATOR) else { return false };
    hash.len() == 64
        && hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && !prefix.is_empty()
        && prefix.len() <= HASHED_PREFIX
        && prefix.bytes().all(|b| is_plain_byte(b) || b == b'%' || b.is_ascii_uppercase())
}

fn is_encoded_name(name: &str) -> bool {
    is_hashed_name(name) || decode_key(name).is_some()
}

/// Makes `path` absolute without touching the file system more than needed: the canonical path
/// when it exists, otherwise the absolute path with `.` and `..` removed lexically.
fn absolute_path(path: &Path) -> PathBuf {
    if let Ok(canonical) = std::fs::canonicalize(path) {
        return canonical;
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn refuse_symlink(path: &Path) -> Result<(), ArtifactError> {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(ArtifactError::Symlink { path: path.to_path_buf() });
    }
    Ok(())
}

/// Files of a run's artifact store, `<run_dir>/artifacts`.
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    root: PathBuf,
    threshold: usize,
}

impl ArtifactStore {
    /// The store of the run directory `run_dir` (made absolute, so pointers are absolute).
    /// Values whose compact JSON is longer than `threshold` bytes are offloaded. Nothing is
    /// created until something is stored.
    pub fn new(run_dir: &Path, threshold: usize) -> ArtifactStore {
        ArtifactStore { root: absolute_path(run_dir).join("artifacts"), threshold }
    }

    /// `<run_dir>/artifacts`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<run_dir>/artifacts/values`.
    pub fn values_dir(&self) -> PathBuf {
        self.root.join("values")
    }

    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// Where the value of `key` is (or would be) stored.
    pub fn path_for(&self, key: &str) -> PathBuf {
        self.values_dir().join(format!("{}.json", encode_key(key)))
    }

    /// The pointer for `key` (whether or not it is stored).
    pub fn pointer_for(&self, key: &str) -> Result<Pointer, ArtifactError> {
        let path = self.path_for(key);
        let Some(text) = path.to_str() else {
            return Err(ArtifactError::NonUtf8Path { key: key.to_string(), path });
        };
        let uri = format!("{POINTER_PREFIX}{text}");
        Ok(Pointer { uri, path })
    }

    /// Whether `value`'s compact JSON is longer than the threshold.
    pub fn exceeds_threshold(&self, value: &Value) -> bool {
        struct Counter {
            bytes: usize,
            limit: usize,
        }
        impl std::io::Write for Counter {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.bytes = self.bytes.saturating_add(buf.len());
                if self.bytes > self.limit {
                    return Err(std::io::Error::other("over the threshold"));
                }
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut counter = Counter { bytes: 0, limit: self.threshold };
        serde_json::to_writer(&mut counter, value).is_err() && counter.bytes > self.threshold
    }

    fn ensure_values_dir(&self, key: &str) -> Result<PathBuf, ArtifactError> {
        let values = self.values_dir();
        for dir in [&self.root, &values] {
            refuse_symlink(dir)?;
        }
        std::fs::create_dir_all(&values).map_err(|source| ArtifactError::Write {
            key: key.to_string(),
            path: values.clone(),
            source,
        })?;
        Ok(values)
    }

    fn store_bytes(&self, key: &str, bytes: &[u8]) -> Result<Pointer, ArtifactError> {
        let pointer = self.pointer_for(key)?;
        let values = self.ensure_values_dir(key)?;
        let name = encode_key(key);
        let write = |path: &Path, bytes: &[u8]| {
            write_atomic_with(path, bytes, Durability::Unsynced).map_err(|source| ArtifactError::Write {
                key: key.to_string(),
                path: path.to_path_buf(),
                source,
            })
        };
        if is_hashed_name(&name) {
            // The key cannot be read back from a shortened name: keep it beside the value.
            write(&values.join(format!("{name}.key")), key.as_bytes())?;
        }
        write(pointer.path(), bytes)?;
        Ok(pointer)
    }

    /// Writes `value` (compact JSON) as the artifact of `key`, replacing any earlier one
    /// atomically, and returns its pointer.
    pub fn store(&self, key: &str, value: &Value) -> Result<Pointer, ArtifactError> {
        let bytes = serde_json::to_vec(value)
            .map_err(|source| ArtifactError::Serialize { key: key.to_string(), source })?;
        self.store_bytes(key, &bytes)
    }

    /// The stored value of `key`, or `None` when there is none.
    pub fn retrieve(&self, key: &str) -> Result<Option<Value>, ArtifactError> {
        let path = self.path_for(key);
        match std::fs::symlink_metadata(&path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(ArtifactError::Read { key: key.to_string(), path, source }),
            Ok(meta) if meta.file_type().is_symlink() => return Err(ArtifactError::Symlink { path }),
            Ok(_) => {}
        }
        self.read_value(key, &path).map(Some)
    }

    fn read_value(&self, key: &str, path: &Path) -> Result<Value, ArtifactError> {
        let bytes =
            crate::regular_file::read(path, crate::regular_file::FileKind::Record).map_err(|source| {
                match source.kind() {
                    std::io::ErrorKind::NotFound => {
                        ArtifactError::Missing { key: key.to_string(), path: path.to_path_buf() }
                    }
                    _ => ArtifactError::Read { key: key.to_string(), path: path.to_path_buf(), source },
                }
            })?;
        serde_json::from_slice(&bytes).map_err(|source| ArtifactError::Corrupt {
            key: key.to_string(),
            path: path.to_path_buf(),
            source,
        })
    }

    /// Whether a value is stored for `key`.
    pub fn has(&self, key: &str) -> bool {
        std::fs::symlink_metadata(self.path_for(key)).is_ok_and(|m| m.file_type().is_file())
    }

    /// Every stored artifact, sorted by key. Files the store did not write are ignored.
    pub fn list(&self) -> Result<Vec<ArtifactInfo>, ArtifactError> {
        let values = self.values_dir();
        let entries = match std::fs::read_dir(&values) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(ArtifactError::List { path: values, source }),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| ArtifactError::List { path: values.clone(), source })?;
            let file_name = entry.file_name();
            let Some(stem) = file_name.to_str().and_then(|n| n.strip_suffix(".json")) else { continue };
            let key = match decode_key(stem) {
                Some(key) => key,
                None if is_hashed_name(stem) => match crate::regular_file::read(
                    values.join(format!("{stem}.key")),
                    crate::regular_file::FileKind::Record,
                ) {
                    Ok(bytes) => match String::from_utf8(bytes) {
                        Ok(key) if encode_key(&key) == stem => key,
                        _ => continue,
                    },
                    Err(_) => continue,
                },
                None => continue,
            };
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            if !meta.file_type().is_file() {
                continue;
            }
            found.push(ArtifactInfo { key, bytes: meta.len(), path });
        }
        found.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(found)
    }

    /// Removes the artifact of `key`; `false` when there was none.
    pub fn remove(&self, key: &str) -> Result<bool, ArtifactError> {
        let path = self.path_for(key);
        let removed = match std::fs::remove_file(&path) {
            Ok(()) => true,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
            Err(source) => return Err(ArtifactError::Remove { key: key.to_string(), path, source }),
        };
        let name = encode_key(key);
        if is_hashed_name(&name) {
            let sidecar = self.values_dir().join(format!("{name}.key"));
            match std::fs::remove_file(&sidecar) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(ArtifactError::Remove { key: key.to_string(), path: sidecar, source })
                }
            }
        }
        Ok(removed)
    }

    /// The value a pointer refers to.
    ///
    /// Values that are not strings starting with `file://` are not pointers: `Ok(None)`. A
    /// `file://` string is read only when it has the shape of a pointer and names, after
    /// canonicalisation (symbolic links and `..` resolved), a file directly inside this store's
    /// `values` directory; anything else is refused with [`ArtifactError::Refused`], and a
    /// pointer to a file that does not exist gives [`ArtifactError::Missing`].
    pub fn resolve(&self, value: &Value) -> Result<Option<Value>, ArtifactError> {
        let Value::String(text) = value else { return Ok(None) };
        if !text.starts_with(POINTER_PREFIX) {
            return Ok(None);
        }
        let refused = |reason: &'static str| ArtifactError::Refused {
            pointer: text.clone(),
            root: self.values_dir(),
            reason,
        };
        let pointer = Pointer::parse_str(text)
            .ok_or_else(|| refused("it does not name a file in an artifact store's `values` directory"))?;
        let key = pointer.key().unwrap_or_else(|| {
            pointer.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
        });
        let target = match std::fs::canonicalize(pointer.path()) {
            Ok(target) => target,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(ArtifactError::Missing { key, path: pointer.path().to_path_buf() })
            }
            Err(source) => {
                return Err(ArtifactError::Read { key, path: pointer.path().to_path_buf(), source })
            }
        };
        let values = std::fs::canonicalize(self.values_dir())
            .map_err(|_| refused("this run's artifact store does not exist"))?;
        if target.parent() != Some(values.as_path()) {
            return Err(refused("it names a file outside this run's artifact store"));
        }
        if !std::fs::metadata(&target).is_ok_and(|m| m.is_file()) {
            return Err(refused("it does not name a regular file"));
        }
        self.read_value(&key, &target).map(Some)
    }

    /// Replaces every listed key whose value's compact JSON is longer than the threshold by a
    /// pointer to a file holding the value. Keys that are absent, small, or already pointers are
    /// left alone. On an error, keys already handled stay offloaded (each key holds either its
    /// value or a pointer to a complete file) and the rest are untouched.
    pub fn offload<K: AsRef<str>>(
        &self,
        context: &mut Context,
        keys: impl IntoIterator<Item = K>,
    ) -> Result<Vec<Offloaded>, ArtifactError> {
        let mut offloaded = Vec::new();
        for key in keys {
            let key = key.as_ref();
            let Some(value) = context.get(key) else { continue };
            if is_pointer(value) || !self.exceeds_threshold(value) {
                continue;
            }
            let bytes = serde_json::to_vec(value)
                .map_err(|source| ArtifactError::Serialize { key: key.to_string(), source })?;
            let pointer = self.store_bytes(key, &bytes)?;
            let path = pointer.path().to_path_buf();
            context.set(key, Value::from(pointer));
            offloaded.push(Offloaded { key: key.to_string(), bytes: bytes.len() as u64, path });
        }
        Ok(offloaded)
    }

    /// Copies an offloaded value to `<work_dir>/.fabro/artifacts/<encoded key>.json`
    /// (atomically), so agents working in `work_dir` can read it; returns the copy's path.
    /// Refuses `.fabro` or `.fabro/artifacts` when they are symbolic links.
    pub fn copy_to_work_dir(&self, offloaded: &Offloaded, work_dir: &Path) -> Result<PathBuf, ArtifactError> {
        let key = offloaded.key.as_str();
        let source = self.path_for(key);
        refuse_symlink(&source)?;
        let bytes =
            crate::regular_file::read(&source, crate::regular_file::FileKind::Record).map_err(|error| {
                match error.kind() {
                    std::io::ErrorKind::NotFound => {
                        ArtifactError::Missing { key: key.to_string(), path: source.clone() }
                    }
                    _ => ArtifactError::Read { key: key.to_string(), path: source.clone(), source: error },
                }
            })?;
        let fabro = work_dir.join(".fabro");
        let dir = fabro.join("artifacts");
        refuse_symlink(&fabro)?;
        refuse_symlink(&dir)?;
        std::fs::create_dir_all(&dir).map_err(|source| ArtifactError::Write {
            key: key.to_string(),
            path: dir.clone(),
            source,
        })?;
        crate::fabro_dir::keep_out_of_git(&fabro);
        let target = dir.join(format!("{}.json", encode_key(key)));
        write_atomic_with(&target, &bytes, Durability::Unsynced).map_err(|source| ArtifactError::Write {
            key: key.to_string(),
            path: target.clone(),
            source,
        })?;
        Ok(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store(threshold: usize) -> (tempfile::TempDir, ArtifactStore) {
        let temp = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(temp.path(), threshold);
        (temp, store)
    }

    fn big(bytes: usize) -> Value {
        json!({ "text": "x".repeat(bytes) })
    }

    #[test]
    fn store_retrieve_has_list_remove_round_trip() {
        let (_temp, store) = store(1024);
        assert!(store.list().unwrap().is_empty());
        assert!(!store.has("b"));
        assert_eq!(store.retrieve("b").unwrap(), None);

        let value = json!({ "list": [1, 2.5, "three", null, true], "nested": { "é": "ü" } });
        let pointer = store.store("b", &value).unwrap();
        store.store("a.key", &json!("short")).unwrap();
        assert!(store.has("b"));
        assert!(is_pointer(&pointer.to_value()));
        assert!(pointer.as_str().starts_with("file:///"));
        assert!(pointer.as_str().ends_with("/artifacts/values/b.json"));
        assert_eq!(pointer.path(), store.path_for("b"));
        assert!(pointer.path().is_absolute());
        assert_eq!(store.retrieve("b").unwrap(), Some(value.clone()));
        assert_eq!(store.resolve(&pointer.to_value()).unwrap(), Some(value.clone()));

        // Replacing a value keeps a single file.
        store.store("b", &json!([1])).unwrap();
        assert_eq!(store.retrieve("b").unwrap(), Some(json!([1])));

        let listed = store.list().unwrap();
        let keys: Vec<&str> = listed.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(keys, ["a.key", "b"]);
        assert_eq!(listed[1].bytes, 3);
        assert_eq!(listed[1].path, store.path_for("b"));

        assert!(store.remove("b").unwrap());
        assert!(!store.remove("b").unwrap());
        assert!(!store.has("b"));
        assert_eq!(store.retrieve("b").unwrap(), None);
        assert_eq!(store.list().unwrap().len(), 1);
    }

    #[test]
    fn offload_replaces_only_values_over_the_threshold() {
        let (_temp, store) = store(1024);
        let mut context = Context::new();
        let large = big(2000);
        let exact = Value::String("y".repeat(1022)); // 1024 bytes with the quotes: not over
        context.set("large", large.clone());
        context.set("small", "hello");
        context.set("exact", exact.clone());
        let foreign = store.pointer_for("elsewhere").unwrap().to_value();
        context.set("pointer", foreign.clone());

        let keys = ["large", "small", "exact", "pointer", "absent"];
        let offloaded = store.offload(&mut context, keys.iter().copied()).unwrap();
        assert_eq!(offloaded.len(), 1);
        assert_eq!(offloaded[0].key, "large");
        assert_eq!(offloaded[0].bytes, serde_json::to_vec(&large).unwrap().len() as u64);
        assert_eq!(offloaded[0].path, store.path_for("large"));

        let pointer = context.get("large").unwrap().clone();
        assert!(is_pointer(&pointer));
        assert_eq!(store.resolve(&pointer).unwrap(), Some(large));
        assert_eq!(context.get("small"), Some(&json!("hello")));
        assert_eq!(context.get("exact"), Some(&exact));
        assert_eq!(context.get("pointer"), Some(&foreign));
        assert!(context.get("absent").is_none());

        // Offloading again changes nothing: the pointer is left alone.
        let again = store.offload(&mut context, vec!["large".to_string()]).unwrap();
        assert!(again.is_empty());
        assert_eq!(context.get("large"), Some(&pointer));
    }

    #[test]
    fn a_ten_megabyte_value_offloads_and_resolves() {
        let (_temp, store) = store(DEFAULT_THRESHOLD);
        let value = Value::String("z".repeat(10 * 1024 * 1024));
        let mut context = Context::new();
        context.set("huge", value.clone());
        let offloaded = store.offload(&mut context, ["huge"]).unwrap();
        assert_eq!(offloaded.len(), 1);
        assert_eq!(offloaded[0].bytes, 10 * 1024 * 1024 + 2);
        let pointer = context.get("huge").unwrap();
        assert!(pointer.as_str().unwrap().len() < 1024);
        assert!(store.resolve(pointer).unwrap() == Some(value));
    }

    #[test]
    fn hostile_keys_stay_inside_the_store_with_distinct_files_and_round_trip() {
        let (_temp, store) = store(1024);
        let long = "k".repeat(1000);
        let long_other = format!("{}j", "k".repeat(999));
        let long_unicode = "💥".repeat(300);
        let keys = [
            "../../etc/passwd",
            "a/b",
            "..",
            ".",
            ".hidden",
            "a\\b",
            "con",
            "CON",
            "nul",
            "com1",
            "",
            "%",
            "a\0b",
            "\0",
            "🦀 emoji ✨",
            long.as_str(),
            long_other.as_str(),
            long_unicode.as_str(),
            "a.b",
            "a%2Eb",
            "a%2eb",
            "a_b",
            "a-b",
            "A.b",
            "a.B",
            "Ab",
            "ab",
            "a~b",
            "graph.goal",
        ];
        let values_dir = store.values_dir();
        let mut paths = std::collections::BTreeSet::new();
        for (index, key) in keys.iter().enumerate() {
            let value = json!({ "index": index, "key": key });
            let pointer = store.store(key, &value).unwrap();
            let path = pointer.path();
            assert_eq!(path.parent(), Some(values_dir.as_path()), "key {key:?}");
            let name = path.file_name().unwrap().to_str().unwrap();
            assert!(name.len() < 200, "key {key:?}: {name}");
            assert!(!name.starts_with('.'), "key {key:?}: {name}");
            assert!(!name.contains(['/', '\\', '\0']), "key {key:?}: {name}");
            assert_eq!(name.matches('.').count(), 1, "key {key:?}: {name}");
            assert!(paths.insert(path.to_path_buf()), "collision for key {key:?}");
            assert!(is_pointer(&pointer.to_value()), "key {key:?}");
            assert!(store.has(key));
            let encoded = encode_key(key);
            if !is_hashed_name(&encoded) {
                assert_eq!(decode_key(&encoded).as_deref(), Some(*key));
                assert_eq!(pointer.key().as_deref(), Some(*key));
            } else {
                assert_eq!(decode_key(&encoded), None);
            }
        }
        // Nothing was written outside the values directory.
        let root_entries: Vec<_> =
            std::fs::read_dir(store.root()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(root_entries, ["values"]);
        for (index, key) in keys.iter().enumerate() {
            let expected = json!({ "index": index, "key": key });
            assert_eq!(store.retrieve(key).unwrap(), Some(expected.clone()), "key {key:?}");
            let pointer = store.pointer_for(key).unwrap().to_value();
            assert_eq!(store.resolve(&pointer).unwrap(), Some(expected), "key {key:?}");
        }
        let mut sorted: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        sorted.sort();
        let listed: Vec<String> = store.list().unwrap().into_iter().map(|i| i.key).collect();
        assert_eq!(listed, sorted);
        for key in keys {
            assert!(store.remove(key).unwrap(), "key {key:?}");
        }
        assert!(store.list().unwrap().is_empty());
        assert_eq!(std::fs::read_dir(&values_dir).unwrap().count(), 0);
    }

    #[test]
    fn encoding_is_readable_and_strict() {
        assert_eq!(encode_key("graph.goal"), "graph%2Egoal");
        assert_eq!(encode_key("a_b-c9"), "a_b-c9");
        assert_eq!(encode_key("Ab"), "%41b");
        assert_eq!(encode_key(""), "%");
        assert_eq!(encode_key("con"), "%63on");
        assert_eq!(encode_key("com0"), "com0");
        let long = encode_key(&"é".repeat(100));
        assert!(long.len() <= MAX_PLAIN_NAME);
        assert!(is_hashed_name(&long));
        assert!(long.starts_with("%C3%A9"));
        // Only what encode_key produces decodes.
        for name in ["%2e", "%61", "con", "%", "%4", "%ZZ", "a.b", "a~b", "%C3", "A"] {
            let decoded = decode_key(name);
            if let Some(key) = &decoded {
                assert_eq!(encode_key(key), name);
            }
        }
        assert_eq!(decode_key("%2e"), None);
        assert_eq!(decode_key("%61"), None);
        assert_eq!(decode_key("con"), None);
        assert_eq!(decode_key("%C3"), None);
        assert_eq!(decode_key("A"), None);
        assert_eq!(decode_key("%"), Some(String::new()));
    }

    #[test]
    fn pointers_are_recognised_by_shape() {
        let (_temp, store) = store(1024);
        assert!(is_pointer(&store.pointer_for("x").unwrap().to_value()));
        for text in [
            "file:///etc/passwd",
            "file://relative/artifacts/values/a.json",
            "file:///r/artifacts/values/../values/a.json",
            "file:///r/artifacts/values/a.b.json",
            "file:///r/artifacts/values/.json",
            "file:///r/artifacts/other/a.json",
            "/r/artifacts/values/a.json",
            "hello",
        ] {
            assert!(!is_pointer(&json!(text)), "{text}");
        }
        assert!(is_pointer(&json!("file:///r/artifacts/values/a.json")));
        assert!(!is_pointer(&json!(["file:///r/artifacts/values/a.json"])));
        assert!(!is_pointer(&json!(null)));
    }

    #[test]
    fn resolve_refuses_pointers_outside_the_store_and_reports_missing_files() {
        let (_temp, store) = store(1024);
        store.store("present", &json!(1)).unwrap();

        // Not pointers at all.
        assert_eq!(store.resolve(&json!("plain text")).unwrap(), None);
        assert_eq!(store.resolve(&json!(42)).unwrap(), None);

        let error = store.resolve(&json!("file:///etc/passwd")).unwrap_err();
        assert!(matches!(error, ArtifactError::Refused { .. }), "{error}");
        assert!(error.to_string().contains("file:///etc/passwd"), "{error}");

        // Another run's store, with the right shape and an existing file.
        let (_other_temp, other) = self::store(1024);
        let foreign = other.store("present", &json!("secret")).unwrap();
        let error = store.resolve(&foreign.to_value()).unwrap_err();
        assert!(matches!(error, ArtifactError::Refused { .. }), "{error}");

        // A link inside the store that leads out of it.
        #[cfg(unix)]
        {
            let link = store.path_for("link");
            std::os::unix::fs::symlink(other.path_for("present"), &link).unwrap();
            let error = store.resolve(&store.pointer_for("link").unwrap().to_value()).unwrap_err();
            assert!(matches!(error, ArtifactError::Refused { .. }), "{error}");
            assert!(matches!(store.retrieve("link"), Err(ArtifactError::Symlink { .. })));
        }

        let missing = store.pointer_for("gone").unwrap();
        let error = store.resolve(&missing.to_value()).unwrap_err();
        assert!(matches!(error, ArtifactError::Missing { .. }), "{error}");
        assert!(error.to_string().contains("gone"), "{error}");
        assert!(error.to_string().contains(&missing.path().display().to_string()), "{error}");

        // Corrupt files are named.
        std::fs::write(store.path_for("bad"), b"{not json").unwrap();
        let error = store.retrieve("bad").unwrap_err();
        assert!(matches!(error, ArtifactError::Corrupt { .. }), "{error}");
    }

    #[test]
    fn copies_offloaded_values_into_the_work_dir() {
        let (_temp, store) = store(1024);
        let work = tempfile::tempdir().unwrap();
        let mut context = Context::new();
        let value = big(4096);
        context.set("review.notes", value.clone());
        let offloaded = store.offload(&mut context, ["review.notes"]).unwrap();
        let copy = store.copy_to_work_dir(&offloaded[0], work.path()).unwrap();
        assert_eq!(copy, work.path().join(".fabro/artifacts/review%2Enotes.json"));
        let copied: Value = serde_json::from_slice(&std::fs::read(&copy).unwrap()).unwrap();
        assert_eq!(copied, value);
        // Copying again replaces the file.
        store.copy_to_work_dir(&offloaded[0], work.path()).unwrap();
        assert_eq!(std::fs::read_dir(work.path().join(".fabro/artifacts")).unwrap().count(), 1);

        let missing = Offloaded { key: "nope".into(), bytes: 0, path: store.path_for("nope") };
        let error = store.copy_to_work_dir(&missing, work.path()).unwrap_err();
        assert!(matches!(error, ArtifactError::Missing { .. }), "{error}");

        #[cfg(unix)]
        {
            let hostile = tempfile::tempdir().unwrap();
            let elsewhere = tempfile::tempdir().unwrap();
            std::os::unix::fs::symlink(elsewhere.path(), hostile.path().join(".fabro")).unwrap();
            let error = store.copy_to_work_dir(&offloaded[0], hostile.path()).unwrap_err();
            assert!(matches!(error, ArtifactError::Symlink { .. }), "{error}");
            assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
        }
    }

    #[test]
    fn relative_run_dirs_give_absolute_pointers() {
        let store = ArtifactStore::new(Path::new("some/../relative/run"), 10);
        assert!(store.root().is_absolute());
        assert!(store.root().ends_with("relative/run/artifacts"));
        let pointer = store.pointer_for("k").unwrap();
        assert!(is_pointer(&pointer.to_value()));
    }
}
