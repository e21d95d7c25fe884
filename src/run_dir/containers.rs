//! `containers.json`: the containers a run's stages ran in (sandbox=podman or docker), each with
//! its id, image and image digest, added as stages end. The containers are removed when the run
//! ends; the record stays, so a run says exactly what it ran in.

use std::path::Path;

use crate::outcome::ContainerRecord;

/// Adds `container` to the record of the run in `root`, unless it is there.
pub fn record(root: &Path, container: &ContainerRecord) {
    let path = root.join(super::layout::CONTAINERS);
    let mut recorded = read(root);
    if recorded.iter().any(|known| known.id == container.id) {
        return;
    }
    recorded.push(container.clone());
    if let Err(error) = super::write_json_file(&path, &recorded) {
        tracing::warn!(%error, "containers not recorded");
    }
}

/// The containers recorded for the run in `root`.
pub fn read(root: &Path) -> Vec<ContainerRecord> {
    crate::regular_file::read_to_string(
        root.join(super::layout::CONTAINERS),
        crate::regular_file::FileKind::Record,
    )
    .ok()
    .and_then(|text| serde_json::from_str(&text).ok())
    .unwrap_or_default()
}
