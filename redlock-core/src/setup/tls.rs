//! TLS for `rediss://` nodes: the connector they use when the builder was given a custom CA,
//! a client certificate, or a connector of its own
//! ([`RedlockBuilder::tls_ca_pem`](crate::RedlockBuilder::tls_ca_pem) and its siblings).
//!
//! With both TLS features compiled in, the PEM settings build a native-tls connector, as
//! fred's own default for `rediss://` does.

use fred::types::config::{Config, TlsConnector};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// What the builder was told about TLS.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    /// A connector given whole.
    pub(crate) connector: Option<TlsConnector>,
    /// The CAs to trust instead of the system's, PEM.
    pub(crate) ca_pem: Option<Vec<u8>>,
    /// The client certificate chain and its PKCS#8 key, PEM.
    pub(crate) client_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsSettings {
    // Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("connector", &self.connector.is_some())
            .field("ca_pem", &self.ca_pem.is_some())
            .field("client_pem", &self.client_pem.is_some())
            .finish()
    }
}

impl TlsSettings {
    /// The connector for `rediss://` nodes, or `None` to keep fred's default (the system's
    /// roots, no client certificate). Checks the PEM text before anything is sent.
    pub(crate) fn connector(&self) -> Result<Option<TlsConnector>, String> {
        if self.connector.is_some() && (self.ca_pem.is_some() || self.client_pem.is_some()) {
            return Err(
                "tls_connector replaces tls_ca_pem and tls_client_pem: give one or the other"
                    .into(),
            );
        }
        if let Some(connector) = &self.connector {
            return Ok(Some(connector.clone()));
        }
        if self.ca_pem.is_none() && self.client_pem.is_none() {
            return Ok(None);
        }
        let roots = self.ca_pem.as_deref().map(certificates).transpose()?;
        let client = match &self.client_pem {
            Some((chain_pem, key_pem)) => Some(ClientPem {
                chain: certificates(chain_pem)?,
                chain_pem,
                key_pem,
            }),
            None => None,
        };
        build(roots, client).map(Some)
    }
}

/// [`parse_url`](crate::setup::node_url::parse_url), with `connector` for a `rediss://` (or
/// `valkeys://`) URL when one is given: the URL is then read as plain, so that fred never
/// builds its own default connector (which reads the system's CAs, and whose rustls set-up
/// panics when two crypto providers are compiled in), and the connector is set after.
pub(crate) fn parse_url_with(
    index: usize,
    raw: &str,
    connector: Option<&TlsConnector>,
) -> Result<(String, Config), crate::error::BuildError> {
    let Some(connector) = connector else {
        return crate::setup::node_url::parse_url(index, raw);
    };
    let plain = raw.split_once("://").and_then(|(scheme, rest)| {
        match scheme.to_ascii_lowercase().as_str() {
            "rediss" => Some(format!("redis://{rest}")),
            "valkeys" => Some(format!("valkey://{rest}")),
            _ => None,
        }
    });
    let Some(plain) = plain else {
        return crate::setup::node_url::parse_url(index, raw);
    };
    let (label, mut config) = crate::setup::node_url::parse_url(index, &plain)?;
    config.tls = Some(connector.clone().into());
    Ok((label, config))
}

/// A client certificate chain (read, and as given) and its key, PEM.
struct ClientPem<'a> {
    #[cfg_attr(feature = "tls-native", allow(dead_code))]
    chain: Vec<CertificateDer<'static>>,
    #[cfg_attr(not(feature = "tls-native"), allow(dead_code))]
    chain_pem: &'a [u8],
    key_pem: &'a [u8],
}

/// Every certificate in `pem`; an error if there is none or one is malformed.
fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    // Never the PEM error's text: it can quote the offending line, which may be a key pasted
    // in the wrong place.
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| String::from(
            "a certificate's PEM is malformed; give -----BEGIN CERTIFICATE----- blocks as openssl writes them",
        ))?;
    if certificates.is_empty() {
        return Err(
            "no certificate in the PEM text; give -----BEGIN CERTIFICATE----- blocks".into(),
        );
    }
    Ok(certificates)
}

/// A native-tls connector trusting `roots` only (when given) and presenting `client`.
#[cfg(feature = "tls-native")]
fn build(
    roots: Option<Vec<CertificateDer<'static>>>,
    client: Option<ClientPem<'_>>,
) -> Result<TlsConnector, String> {
    let mut builder = native_tls::TlsConnector::builder();
    if let Some(roots) = roots {
        builder.disable_built_in_roots(true);
        for root in roots {
            let root = native_tls::Certificate::from_der(&root)
                .map_err(|e| format!("a CA certificate could not be used: {e}"))?;
            builder.add_root_certificate(root);
        }
    }
    if let Some(client) = client {
        // OpenSSL's own text is a stack of decoder codes: a fixed message says more.
        let identity = native_tls::Identity::from_pkcs8(client.chain_pem, client.key_pem)
            .map_err(|_| {
                String::from(
                    "the client certificate and key could not be used together: the key must be PKCS#8 (-----BEGIN PRIVATE KEY-----) and belong to the certificate",
                )
            })?;
        builder.identity(identity);
    }
    TlsConnector::try_from(builder).map_err(|e| e.details().to_owned())
}

/// A rustls connector (ring) trusting `roots` only (when given; the system's otherwise) and
/// presenting `client`.
#[cfg(all(feature = "tls-rustls", not(feature = "tls-native")))]
fn build(
    roots: Option<Vec<CertificateDer<'static>>>,
    client: Option<ClientPem<'_>>,
) -> Result<TlsConnector, String> {
    use std::sync::Arc;

    use rustls_pki_types::PrivateKeyDer;

    let mut store = rustls::RootCertStore::empty();
    let roots = match roots {
        Some(roots) => roots,
        None => {
            let system = rustls_native_certs::load_native_certs();
            if system.certs.is_empty()
                && let Some(error) = system.errors.first()
            {
                return Err(format!(
                    "the system's CA certificates could not be read: {error}"
                ));
            }
            system.certs
        }
    };
    for root in roots {
        store
            .add(root)
            .map_err(|e| format!("a CA certificate could not be used: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(store);
    let config = match client {
        Some(client) => {
            // Never the PEM error's text: it can quote the key's line.
            let key = PrivateKeyDer::from_pem_slice(client.key_pem).map_err(|e| match e {
                rustls_pki_types::pem::Error::NoItemsFound => String::from(
                    "no private key (-----BEGIN PRIVATE KEY-----) in the client key's PEM",
                ),
                _ => String::from(
                    "the client key's PEM is malformed; give a PKCS#8 key (-----BEGIN PRIVATE KEY-----) as openssl writes it",
                ),
            })?;
            builder
                .with_client_auth_cert(client.chain, key)
                .map_err(|e| format!("the client certificate and key could not be used: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(TlsConnector::from(config))
}
