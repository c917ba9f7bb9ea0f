//! PEM text as the operator stores it in Secrets and ConfigMaps: CA bundles are concatenated
//! certificates, the signing CA first. Shared by the webhook's certificates and the ensemble PKI.

const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
const END: &str = "-----END CERTIFICATE-----";

/// The certificates of `bundle`, each as one PEM block ending in a newline.
pub fn certificates(bundle: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut rest = bundle;
    while let Some(start) = rest.find(BEGIN) {
        let Some(len) = rest[start..].find(END) else {
            break;
        };
        let end = start + len + END.len();
        blocks.push(format!("{}\n", &rest[start..end]));
        rest = &rest[end..];
    }
    blocks
}

/// The first certificate of `bundle` (the CA that signs now), if it holds one.
pub fn first_certificate(bundle: &str) -> Option<String> {
    certificates(bundle).into_iter().next()
}

/// A short, stable name for one certificate (hex of the first 12 bytes of the SHA-256 of its
/// base64 text, whitespace ignored): records which CA signed a certificate without parsing
/// X.509. An identifier, not a security check: the TLS handshake verifies signatures.
pub fn fingerprint(cert_pem: &str) -> String {
    let text: Vec<u8> = cert_pem
        .bytes()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    let digest = ring::digest::digest(&ring::digest::SHA256, &text);
    digest.as_ref()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    const B: &str = "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----";

    #[test]
    fn bundles_split_into_their_certificates() {
        let bundle = format!("{A}\n{B}\n");
        assert_eq!(certificates(&bundle), vec![A.to_string(), format!("{B}\n")]);
        assert_eq!(first_certificate(&bundle).as_deref(), Some(A));
        assert!(certificates("no pem here").is_empty());
        assert!(certificates("-----BEGIN CERTIFICATE-----\ntruncated").is_empty());
    }

    #[test]
    fn fingerprints_ignore_layout_but_not_content() {
        assert_eq!(fingerprint(A), fingerprint(&A.replace('\n', "\r\n")));
        assert_ne!(fingerprint(A), fingerprint(B));
        assert_eq!(fingerprint(A).len(), 24);
    }
}
