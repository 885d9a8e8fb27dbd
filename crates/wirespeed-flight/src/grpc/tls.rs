//! TLS for the gRPC plane, with rustls over ring: a server's certificate and, for mutual TLS,
//! the authority its clients' certificates must come from; a client's roots, its own
//! certificate, and the name it checks. Everything is PEM, as Arrow's Flight libraries take it.

use std::sync::Arc;

use tokio_rustls::rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use tokio_rustls::rustls::crypto::{CryptoProvider, ring, verify_tls12_signature, verify_tls13_signature};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::error::{Error, Result};

/// What a server presents, and whom it lets in.
#[derive(Clone, Debug)]
pub struct ServerTls {
    /// PEM: the server's certificate, then any intermediates.
    pub cert_chain: Vec<u8>,
    /// PEM: its private key (PKCS#8, PKCS#1 or SEC1).
    pub private_key: Vec<u8>,
    /// PEM: with it, every client must present a certificate issued by one of these (mutual
    /// TLS); without it, none is asked for.
    pub client_ca: Option<Vec<u8>>,
}

/// What a client trusts and presents.
#[derive(Clone, Debug, Default)]
pub struct ClientTls {
    /// PEM roots that replace the system's.
    pub roots: Option<Vec<u8>>,
    /// PEM certificate chain and private key, for servers that want mutual TLS.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name the server's certificate must carry, instead of the URL's host.
    pub server_name: Option<String>,
    /// Accept any certificate: encrypts, but proves nothing about the server.
    pub skip_verification: bool,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

fn bad(what: &str, e: impl std::fmt::Display) -> Error {
    Error::invalid_argument(format!("TLS: {what}: {e}"))
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>().map_err(|e| bad(what, e))?;
    if certs.is_empty() {
        return Err(bad(what, "no PEM certificate in it"));
    }
    Ok(certs)
}

fn private_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| bad("private key", e))
}

fn root_store(pem: &[u8], what: &str) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(pem, what)? {
        roots.add(cert).map_err(|e| bad(what, e))?;
    }
    Ok(roots)
}

/// gRPC is HTTP/2, and over TLS says so in ALPN.
const ALPN_H2: &[u8] = b"h2";

pub(crate) fn acceptor(tls: &ServerTls) -> Result<TlsAcceptor> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("protocol versions", e))?;
    let builder = match &tls.client_ca {
        Some(pem) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(root_store(pem, "client CA")?), provider())
                    .build()
                    .map_err(|e| bad("client CA", e))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certificates(&tls.cert_chain, "certificate chain")?, private_key(&tls.private_key)?)
        .map_err(|e| bad("certificate and key", e))?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The connector and the name to check for a server reached at `host`.
pub(crate) fn connector(tls: &ClientTls, host: &str) -> Result<(TlsConnector, ServerName<'static>)> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("protocol versions", e))?;
    let builder = if tls.skip_verification {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyServer(provider())))
    } else {
        let roots = match &tls.roots {
            Some(pem) => root_store(pem, "root certificates")?,
            None => system_roots()?,
        };
        builder.with_root_certificates(roots)
    };
    let mut config = match &tls.identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(certificates(chain, "client certificate chain")?, private_key(key)?)
            .map_err(|e| bad("client certificate and key", e))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    let name = tls.server_name.as_deref().unwrap_or(host).trim_matches(['[', ']']);
    let name = ServerName::try_from(name.to_string()).map_err(|e| bad("server name", e))?;
    Ok((TlsConnector::from(Arc::new(config)), name))
}

fn system_roots() -> Result<RootCertStore> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err(Error::unavailable("TLS: no system root certificates; give the server's roots".to_string()));
    }
    Ok(roots)
}

/// Takes any server certificate, still checking that the handshake was signed by its key.
#[derive(Debug)]
struct AnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
