//! Certificates made in the test set-up (rcgen): a CA, a server certificate for
//! `127.0.0.1` and `localhost` that it signs, and a client certificate it signs, written as
//! PEM files for `redis-server --tls-*`; and a second CA that signed none of them.

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA, and the server and client certificates it signed, as PEM text and files.
#[derive(Debug)]
pub struct Certificates {
    /// The directory of the files, removed on drop.
    pub dir: PathBuf,
    /// The CA's certificate.
    pub ca_pem: String,
    /// The client certificate.
    pub client_pem: String,
    /// The client certificate's key (PKCS#8).
    pub client_key_pem: String,
    /// A CA that signed nothing here: trusting it alone must refuse the server.
    pub other_ca_pem: String,
}

impl Certificates {
    /// Makes the certificates and writes `ca.crt`, `server.crt` and `server.key` in a fresh
    /// directory.
    pub fn generate() -> Self {
        let (ca_pem, issuer) = ca("redlock test CA");
        let (other_ca_pem, _) = ca("redlock test, another CA");
        let (server_pem, server_key) = leaf(
            &issuer,
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_pem, client_key_pem) = leaf(
            &issuer,
            vec!["redlock-test-client".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let dir = std::env::temp_dir().join(format!(
            "redlock-test-tls-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for (name, text) in [
            ("ca.crt", &ca_pem),
            ("server.crt", &server_pem),
            ("server.key", &server_key),
        ] {
            std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        Self {
            dir,
            ca_pem,
            client_pem,
            client_key_pem,
            other_ca_pem,
        }
    }

    /// `redis-server` arguments serving TLS on `port` with these certificates; clients must
    /// present a certificate the CA signed when `require_client_certificate`.
    pub fn server_args(&self, port: u16, require_client_certificate: bool) -> Vec<String> {
        let file = |name: &str| self.dir.join(name).display().to_string();
        vec![
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            file("server.crt"),
            "--tls-key-file".into(),
            file("server.key"),
            "--tls-ca-cert-file".into(),
            file("ca.crt"),
            "--tls-auth-clients".into(),
            if require_client_certificate {
                "yes"
            } else {
                "no"
            }
            .into(),
        ]
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A self-signed CA: its certificate (PEM) and the issuer that signs with it.
fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("CA key: {e}"));
    let mut params =
        CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("CA params: {e}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params
        .self_signed(&key)
        .unwrap_or_else(|e| panic!("CA certificate: {e}"));
    (cert.pem(), Issuer::new(params, key))
}

/// A certificate for `names` signed by `issuer`, for `usage`: its PEM and its key's (PKCS#8).
fn leaf(
    issuer: &Issuer<'static, KeyPair>,
    names: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("key: {e}"));
    let mut params =
        CertificateParams::new(names.clone()).unwrap_or_else(|e| panic!("params: {e}"));
    params
        .distinguished_name
        .push(DnType::CommonName, names[0].as_str());
    params.extended_key_usages = vec![usage];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let cert = params
        .signed_by(&key, issuer)
        .unwrap_or_else(|e| panic!("certificate: {e}"));
    (cert.pem(), key.serialize_pem())
}
