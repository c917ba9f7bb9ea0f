//! The sidecar-injection webhook (DESIGN.md §3 "Injection"): [`inject`] decides and builds the
//! JSON patch (pure), [`review`] answers one AdmissionReview, [`lookup`] finds the ensemble,
//! [`server`] serves HTTPS with reloadable certificates, [`certs`] and [`cert_store`] make,
//! store and rotate them.

pub mod cert_store;
pub mod certs;
pub mod inject;
pub mod lookup;
pub mod review;
pub mod server;
pub mod sidecar;

#[cfg(test)]
mod tests;
