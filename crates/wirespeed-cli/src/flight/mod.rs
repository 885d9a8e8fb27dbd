//! Arrow Flight from the command line: `serve DIR` and `get URL PATH`.

pub mod get;
pub mod serve;

use std::path::Path;

use wirespeed::Key;

/// The data-plane key: WIRESPEED_KEY or a key file; None when neither is set.
fn key(file: Option<&Path>) -> anyhow::Result<Option<Key>> {
    Ok(Key::from_env_or_file(file)?)
}

/// The gRPC password: WIRESPEED_FLIGHT_PASSWORD or a file; never a command-line value.
fn password(file: Option<&Path>) -> anyhow::Result<Option<String>> {
    if let Some(f) = file {
        let text = std::fs::read_to_string(f).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", f.display()))?;
        return Ok(Some(text.trim_end_matches(['\n', '\r']).to_string()));
    }
    Ok(std::env::var("WIRESPEED_FLIGHT_PASSWORD").ok().filter(|p| !p.is_empty()))
}
