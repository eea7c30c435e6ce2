//! The TLS settings of the builder: the CA to trust, a client certificate, a connector of
//! one's own (with a TLS feature), and those of a [`RedlockConfig`](crate::RedlockConfig).

use super::RedlockBuilder;
use crate::error::BuildError;
use crate::setup::config::PemSource;
#[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
use crate::setup::config::SetIf;

impl RedlockBuilder {
    /// Trusts the CA certificates in `pem` (one or more `-----BEGIN CERTIFICATE-----`
    /// blocks), and only those, for every `rediss://` node: a managed Redis or a server of
    /// your own whose certificate a private CA signed. Without it, `rediss://` trusts the
    /// system's CA certificates. `redis://` nodes and clients given with
    /// [`client`](Self::client) are unaffected. Needs the `tls-rustls` or `tls-native`
    /// feature (native-tls when both are compiled in, as fred's own default).
    ///
    /// The server's certificate must name the host of the URL (a DNS name, or an IP address
    /// for a URL such as `rediss://10.0.0.5:6380`).
    ///
    /// # Errors
    /// [`build`](Self::build) fails with [`BuildError::Tls`], before connecting, if `pem`
    /// holds no certificate or a malformed one.
    #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
    pub fn tls_ca_pem(mut self, pem: impl AsRef<[u8]>) -> Self {
        self.tls.ca_pem = Some(pem.as_ref().to_vec());
        self
    }

    /// Presents a client certificate to every `rediss://` node (mutual TLS, for servers
    /// started with `tls-auth-clients yes`): `chain_pem` holds the certificate, then any
    /// intermediates (`-----BEGIN CERTIFICATE-----` blocks), and `key_pem` its PKCS#8 key
    /// (`-----BEGIN PRIVATE KEY-----`; convert an RSA or EC key with `openssl pkcs8 -topk8
    /// -nocrypt`). Combines with [`tls_ca_pem`](Self::tls_ca_pem); the key is kept in memory
    /// only, and never printed. Needs the `tls-rustls` or `tls-native` feature.
    ///
    /// # Errors
    /// [`build`](Self::build) fails with [`BuildError::Tls`], before connecting, if the chain
    /// holds no certificate, or the key cannot be read or does not fit the certificate.
    #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
    pub fn tls_client_pem(
        mut self,
        chain_pem: impl AsRef<[u8]>,
        key_pem: impl AsRef<[u8]>,
    ) -> Self {
        self.tls.client_pem = Some((chain_pem.as_ref().to_vec(), key_pem.as_ref().to_vec()));
        self
    }

    /// Uses `connector` for every `rediss://` node: a rustls `ClientConfig` or a native-tls
    /// connector built by hand (`.into()` converts either), for what
    /// [`tls_ca_pem`](Self::tls_ca_pem) and [`tls_client_pem`](Self::tls_client_pem) do not
    /// cover. Needs the `tls-rustls` or `tls-native` feature.
    ///
    /// # Errors
    /// [`build`](Self::build) fails with [`BuildError::Tls`] if the PEM settings are given
    /// too: this replaces them.
    #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
    pub fn tls_connector(mut self, connector: fred::types::config::TlsConnector) -> Self {
        self.tls.connector = Some(connector);
        self
    }

    /// The TLS options of a [`RedlockConfig`](crate::RedlockConfig).
    #[cfg(any(feature = "tls-rustls", feature = "tls-native"))]
    pub(super) fn tls_config(
        self,
        ca: Option<PemSource>,
        cert: Option<PemSource>,
        key: Option<PemSource>,
    ) -> Self {
        let builder = match ca.map(|ca| ca.read("tls_ca")).transpose() {
            Ok(ca) => self.set_if(ca, Self::tls_ca_pem),
            Err(error) => return self.defer(error),
        };
        match (cert, key) {
            (None, None) => builder,
            (Some(cert), Some(key)) => {
                match (cert.read("tls_client_cert"), key.read("tls_client_key")) {
                    (Ok(cert), Ok(key)) => builder.tls_client_pem(cert, key),
                    (Err(error), _) | (_, Err(error)) => builder.defer(error),
                }
            }
            (Some(_), None) | (None, Some(_)) => builder.defer(BuildError::Tls {
                reason: "tls_client_cert and tls_client_key go together: give both, or neither"
                    .into(),
            }),
        }
    }

    /// The TLS options of a [`RedlockConfig`](crate::RedlockConfig), without a TLS feature: an error if set.
    #[cfg(not(any(feature = "tls-rustls", feature = "tls-native")))]
    pub(super) fn tls_config(
        self,
        ca: Option<PemSource>,
        cert: Option<PemSource>,
        key: Option<PemSource>,
    ) -> Self {
        let given = [
            ("tls_ca", ca.is_some()),
            ("tls_client_cert", cert.is_some()),
            ("tls_client_key", key.is_some()),
        ];
        match given.into_iter().find(|(_, set)| *set) {
            Some((name, _)) => self.defer(BuildError::Option {
                name,
                reason: "needs the tls-rustls or tls-native feature of redlock-core".into(),
            }),
            None => self,
        }
    }
}

#[cfg(all(test, any(feature = "tls-rustls", feature = "tls-native")))]
mod tests {
    use super::*;
    use crate::setup::builder::{CERT, lookup};

    #[test]
    fn tls_files_are_read_and_a_lone_client_cert_is_refused() {
        let missing = RedlockBuilder::default()
            .node("rediss://127.0.0.1:1")
            .from_env_with(lookup(&[("REDLOCK_TLS_CA", "/nonexistent/ca.pem")]));
        assert!(matches!(
            missing.deferred,
            Some(BuildError::ReadFile { option: "tls_ca", ref source, .. })
                if source.kind() == std::io::ErrorKind::NotFound
        ));
        let lone = RedlockBuilder::default()
            .node("rediss://127.0.0.1:1")
            .from_env_with(lookup(&[("REDLOCK_TLS_CLIENT_CERT", CERT)]));
        assert!(matches!(lone.deferred, Some(BuildError::Tls { .. })));
        let file = std::env::temp_dir().join(format!("redlock-ca-{}.pem", std::process::id()));
        std::fs::write(&file, CERT).unwrap();
        let read = RedlockBuilder::default()
            .node("rediss://127.0.0.1:1")
            .from_env_with(lookup(&[("REDLOCK_TLS_CA", file.to_str().unwrap())]));
        std::fs::remove_file(&file).unwrap();
        assert!(read.deferred.is_none());
        assert_eq!(read.tls.ca_pem.as_deref(), Some(CERT.as_bytes()));
    }
}
