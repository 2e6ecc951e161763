//! Compile-fail tests of `#[rondo::main]` and `#[rondo::test]`: each file under `tests/ui/`
//! misuses a macro, and its `.stderr` holds the exact error the user sees.
//!
//! After changing a message, regenerate the expected output with
//! `TRYBUILD=overwrite cargo test --release --test macros_ui` and review the diff.

#[test]
fn misuse_is_a_clear_compile_error() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
