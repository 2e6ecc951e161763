//! rondo: a work-stealing async runtime with weighted fairness groups.

#![warn(missing_docs)]

#[allow(dead_code)]
mod shim;
pub mod sync;
