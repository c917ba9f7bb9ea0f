//! The injection webhook end to end: real AdmissionReview JSON over HTTPS to the running server
//! (`https.rs`), and the certificate, Secret and caBundle logic against a mocked API server
//! (`cert_store.rs`).

mod cert_store;
mod example;
mod https;
