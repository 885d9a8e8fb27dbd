//! Arrow Flight from the command line: `serve DIR` and `get URL PATH`.

pub mod get;
pub mod serve;

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use wirespeed::Key;
use wirespeed_flight::{ClientTls, ServerTls};

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

/// TLS files, PEM: for `serve` its certificate, key and client CA; for `get` its roots, and a
/// certificate and key for servers that want mutual TLS.
#[derive(Args, Debug, Default)]
pub struct TlsArgs {
    /// Certificate chain: `serve` answers on grpc+tls:// with it; `get` presents it (mutual TLS).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// `serve`: clients must present a certificate issued by this CA (mutual TLS).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
}

fn read(file: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(file).with_context(|| format!("cannot read the {what} {}", file.display()))
}

impl TlsArgs {
    fn has_identity(&self) -> bool {
        self.tls_cert.is_some()
    }

    fn identity(&self) -> anyhow::Result<Option<(Vec<u8>, Vec<u8>)>> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Ok(Some((read(cert, "certificate")?, read(key, "private key")?))),
            _ => Ok(None),
        }
    }

    fn server(&self) -> anyhow::Result<Option<ServerTls>> {
        let Some((cert_chain, private_key)) = self.identity()? else { return Ok(None) };
        let client_ca = self.tls_client_ca.as_deref().map(|f| read(f, "client CA")).transpose()?;
        Ok(Some(ServerTls { cert_chain, private_key, client_ca }))
    }

    fn client(
        &self,
        roots: Option<&Path>,
        server_name: Option<String>,
        skip_verification: bool,
    ) -> anyhow::Result<ClientTls> {
        if self.tls_client_ca.is_some() {
            anyhow::bail!("--tls-client-ca is for serve; get takes --tls-roots");
        }
        Ok(ClientTls {
            roots: roots.map(|f| read(f, "root certificates")).transpose()?,
            identity: self.identity()?,
            server_name,
            skip_verification,
        })
    }
}
