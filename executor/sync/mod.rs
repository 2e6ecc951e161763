//! Async synchronisation primitives that work under any executor.
