//! The `#[rondo::main]` and `#[rondo::test]` attributes.
//!
//! Use them through the `rondo` crate (its default `macros` feature re-exports them); this crate
//! only holds the code generation, because a proc-macro must live in a crate of its own.
//!
//! Both attributes turn an `async fn` into a plain one that builds a `rondo::Runtime`, runs
//! the body to completion with `block_on` and returns what the body returned. The options:
//!
//! | option | values | default |
//! | --- | --- | --- |
//! | `worker_threads = N` | an integer literal from 1 to `rondo::runtime::MAX_WORKERS` | one worker per core |
//! | `flavor = "..."` | `"multi_thread"`, or `"current_thread"` for exactly one worker | `"multi_thread"` |
//! | `crate = "path"` | the path `rondo` is reachable by, for a renamed dependency | `"::rondo"` |
//! | `start_paused = B` | `true` or `false`: start with the clock paused (`rondo::Builder::start_paused`) | `false` |
//! | `shutdown_timeout = "T"` | a duration such as `"500ms"`, `"10s"` or `"2m"`: when the body returns, shut the runtime down with `rondo::Runtime::shutdown_timeout(T)` | wait for running blocking work however long it takes (`Drop`) |
//!
//! A `worker_threads` of 0 or a value that is not an integer literal is a compile error; one above
//! `rondo::runtime::MAX_WORKERS` is refused by `rondo::Builder::build` when the function starts, and the
//! function panics with its message.
//!
//! rondo has no runtime that runs tasks on the calling thread, so `"current_thread"` means one
//! worker thread beside the thread blocked in `block_on`; it cannot be combined with
//! `worker_threads`.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{ToTokens, quote};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ItemFn, Lit, Meta, Token};

/// Runs an `async fn main` on a new rondo runtime.
///
/// The function becomes a plain `fn main` that builds a runtime with the options given and runs
/// the body with `block_on`; the runtime shuts down when the body returns. `main` may return
/// anything a plain `main` may, such as a `Result`.
///
/// ```
/// #[rondo::main(worker_threads = 2)]
/// async fn main() -> Result<(), std::num::ParseIntError> {
///     let n: u32 = "20".parse()?;
///     let doubled = rondo::spawn(async move { n * 2 }).await.unwrap();
///     assert_eq!(doubled, 40);
///     assert_eq!(rondo::Handle::current().worker_count(), 2);
///     Ok(())
/// }
/// ```
///
/// The options are `worker_threads = N` (1 to `rondo::runtime::MAX_WORKERS`, default one per core),
/// `flavor = "multi_thread"` (the default) or `flavor = "current_thread"` (one worker),
/// `start_paused = true` to start with the clock paused (see `rondo::time::pause`),
/// `shutdown_timeout = "10s"` (units `ms`, `s`, `m`) to bound the shutdown that follows the body,
/// and `crate = "path"` for a renamed `rondo` dependency. The function must be `async`, take no
/// arguments and have no generic parameters; anything else is a compile error that says so.
///
/// With `shutdown_timeout`, what `main` leaves behind is bounded: tasks still running when the
/// body returns are cancelled, and blocking work still running is waited for at most that long
/// (a server's graceful shutdown in `main` is in the guide, *Serving and shutting down*).
///
/// ```
/// # mod app {
/// use std::time::Duration;
///
/// #[rondo::main(shutdown_timeout = "200ms")]
/// async fn main() {
///     rondo::spawn(std::future::pending::<()>());
///     let started = rondo::spawn_blocking(|| std::thread::sleep(Duration::from_secs(30)));
///     rondo::time::sleep(Duration::from_millis(20)).await;
///     assert!(!started.is_finished());
/// }
/// # pub fn run() { main() }
/// # }
/// # fn main() {
/// # // `main` returns within the timeout, not after the blocking closure's 30 seconds.
/// # let t = std::time::Instant::now();
/// # app::run();
/// # assert!(t.elapsed() < std::time::Duration::from_secs(10));
/// # }
/// ```
#[proc_macro_attribute]
pub fn main(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(Entry::Main, args.into(), item.into()).into()
}

/// Runs an `async fn` test on a new rondo runtime of its own.
///
/// The function becomes a `#[test]` function (do not add `#[test]` as well) that builds a runtime
/// with the options given and runs the body with `block_on`. Tests may return a `Result`, and
/// other attributes such as `#[should_panic]` or `#[ignore]` keep working.
///
/// ```
/// #[rondo::test(flavor = "current_thread")]
/// async fn one_worker() -> Result<(), rondo::JoinError> {
///     let v = rondo::spawn(async { 6 * 7 }).await?;
///     assert_eq!(v, 42);
///     assert_eq!(rondo::Handle::current().worker_count(), 1);
///     Ok(())
/// }
/// ```
///
/// (Outside `cargo test` the `#[test]` function is compiled out, so this example only shows the
/// macro's input; rondo's `tests/macros.rs` runs tests like it.)
///
/// The options are those of [`main`](macro@main): `worker_threads = N`, `flavor`,
/// `start_paused` and `crate`. With `start_paused = true` the runtime's clock starts paused, as
/// with tokio's `#[tokio::test(start_paused = true)]`: sleeps and timeouts complete in no real
/// time, the clock jumping to the next timer whenever the runtime is idle.
///
/// ```
/// #[rondo::test(start_paused = true)]
/// async fn an_hour_in_no_time() {
///     let start = rondo::time::Instant::now();
///     rondo::time::sleep(std::time::Duration::from_secs(3600)).await;
///     assert!(start.elapsed() >= std::time::Duration::from_secs(3600));
/// }
/// ```
#[proc_macro_attribute]
pub fn test(args: TokenStream, item: TokenStream) -> TokenStream {
    expand(Entry::Test, args.into(), item.into()).into()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Entry {
    Main,
    Test,
}

impl Entry {
    fn attr(self) -> &'static str {
        match self {
            Entry::Main => "#[rondo::main]",
            Entry::Test => "#[rondo::test]",
        }
    }
}

/// The options after validation.
struct Options {
    /// `None` leaves the builder's default, one worker per core.
    workers: Option<usize>,
    /// `start_paused = true`.
    start_paused: bool,
    /// `shutdown_timeout = "T"`, in nanoseconds; `None` leaves the shutdown to `Drop`.
    shutdown_timeout: Option<u64>,
    krate: syn::Path,
}

/// Every error found is reported at once, so a user fixes them in one round.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, span: Span, message: impl std::fmt::Display) {
        self.add(syn::Error::new(span, message));
    }

    /// Points at all of `tokens`, not only their first token.
    fn push_spanned(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.add(syn::Error::new_spanned(tokens, message));
    }

    fn add(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
}

fn expand(entry: Entry, args: TokenStream2, item: TokenStream2) -> TokenStream2 {
    let mut errors = Errors::default();
    let options = parse_options(entry, args, &mut errors);
    let item: ItemFn = match syn::parse2(item) {
        Ok(f) => f,
        Err(e) => {
            let e = syn::Error::new(
                e.span(),
                format!("{} applies to an `async fn`: {e}", entry.attr()),
            );
            return e.to_compile_error();
        }
    };
    let signature_ok = check_signature(entry, &item, &mut errors);
    match errors.0 {
        None => generate(entry, &options, item),
        // A bad option alone still expands, with the options that were valid, so that errors in
        // the body are reported in the same round.
        Some(e) if signature_ok => {
            let mut out = e.to_compile_error();
            out.extend(generate(entry, &options, item));
            out
        }
        // A body that cannot be wrapped is left out; a `main` keeps an empty stand-in so that
        // rustc does not add a confusing "`main` function not found" to the real error.
        Some(e) => {
            let mut out = e.to_compile_error();
            if entry == Entry::Main && item.sig.ident == "main" {
                out.extend(quote!(
                    fn main() {}
                ));
            }
            out
        }
    }
}

fn parse_options(entry: Entry, args: TokenStream2, errors: &mut Errors) -> Options {
    let attr = entry.attr();
    let mut options = Options {
        workers: None,
        start_paused: false,
        shutdown_timeout: None,
        krate: syn::parse_quote!(::rondo),
    };
    let metas = match Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args) {
        Ok(m) => m,
        Err(e) => {
            errors.push(
                e.span(),
                format!(
                    "{attr} takes options of the form `name = value`, separated by commas: {e}"
                ),
            );
            return options;
        }
    };

    let mut workers: Option<(usize, Span)> = None;
    let mut current_thread = false;
    let mut seen: Vec<String> = Vec::new();
    for meta in metas {
        let name = meta
            .path()
            .get_ident()
            .map(ToString::to_string)
            .unwrap_or_else(|| quote!(#meta).to_string());
        let value = match &meta {
            Meta::NameValue(nv) => &nv.value,
            _ => {
                let example = match name.as_str() {
                    "worker_threads" => "worker_threads = 4",
                    "flavor" => "flavor = \"current_thread\"",
                    "crate" => "crate = \"my_rondo\"",
                    "start_paused" => "start_paused = true",
                    "shutdown_timeout" => "shutdown_timeout = \"10s\"",
                    _ => "worker_threads = 4",
                };
                errors.push(
                    meta.span(),
                    format!("{attr} options take the form `name = value`, as in `{example}`"),
                );
                continue;
            }
        };
        if seen.contains(&name) {
            errors.push(meta.span(), format!("`{name}` is given twice"));
            continue;
        }
        seen.push(name.clone());
        match name.as_str() {
            "worker_threads" => match int_literal(value) {
                Some(0) => errors.push(
                    value.span(),
                    "`worker_threads` must be at least 1 (got 0): a runtime needs a worker",
                ),
                Some(n) => workers = Some((n, meta.span())),
                _ => errors.push(
                    value.span(),
                    "`worker_threads` takes a positive integer literal, as in `worker_threads = 4`",
                ),
            },
            "flavor" => match str_literal(value).as_deref() {
                Some("multi_thread") => {}
                Some("current_thread") => current_thread = true,
                Some(other) => errors.push(
                    value.span(),
                    format!(
                        "unknown flavor `{other}`: use \"multi_thread\" (the default, one worker \
                         per core unless `worker_threads` says otherwise) or \"current_thread\" \
                         (one worker)"
                    ),
                ),
                None => errors.push(
                    value.span(),
                    "`flavor` takes a string, \"multi_thread\" or \"current_thread\"",
                ),
            },
            "crate" => match str_literal(value).map(|s| syn::parse_str::<syn::Path>(&s)) {
                Some(Ok(path)) => options.krate = path,
                _ => errors.push(
                    value.span(),
                    "`crate` takes the path of the rondo crate as a string, as in \
                     `crate = \"my_rondo\"`",
                ),
            },
            "start_paused" => match value {
                Expr::Lit(ExprLit {
                    lit: Lit::Bool(b), ..
                }) => options.start_paused = b.value,
                _ => errors.push(
                    value.span(),
                    "`start_paused` takes `true` or `false`, as in `start_paused = true`",
                ),
            },
            "shutdown_timeout" => match str_literal(value).as_deref().map(parse_duration) {
                Some(Ok(nanos)) => options.shutdown_timeout = Some(nanos),
                Some(Err(why)) => errors.push(value.span(), why),
                None => errors.push(
                    value.span(),
                    "`shutdown_timeout` takes a duration as a string, as in \
                     `shutdown_timeout = \"10s\"` (units `ms`, `s`, `m`)",
                ),
            },
            _ => errors.push(
                meta.path().span(),
                format!(
                    "unknown option `{name}`: {attr} accepts `worker_threads`, `flavor`, \
                     `start_paused`, `shutdown_timeout` and `crate`"
                ),
            ),
        }
    }

    options.workers = match (workers, current_thread) {
        (Some((_, span)), true) => {
            errors.push(
                span,
                "`worker_threads` cannot be combined with `flavor = \"current_thread\"`, which \
                 always has one worker; remove one of them",
            );
            Some(1)
        }
        (None, true) => Some(1),
        (workers, false) => workers.map(|(n, _)| n),
    };
    options
}

/// A duration written as a whole number and a unit (`ms`, `s` or `m`), in nanoseconds.
fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let nanos_per_unit: u64 = match unit.trim() {
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "" => {
            return Err(format!(
                "`shutdown_timeout = \"{text}\"` has no unit: write a whole number and `ms`, `s` \
                 or `m`, as in \"10s\""
            ));
        }
        other => {
            return Err(format!(
                "unknown unit `{other}` in `shutdown_timeout`: use `ms`, `s` or `m`, as in \"10s\""
            ));
        }
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(nanos_per_unit))
        .ok_or_else(|| {
            format!(
                "`shutdown_timeout = \"{text}\"` needs a whole number of at most 584 years before \
                 its unit, as in \"10s\""
            )
        })
}

/// The value of an integer literal that fits a `usize`.
fn int_literal(value: &Expr) -> Option<usize> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => i.base10_parse::<usize>().ok(),
        _ => None,
    }
}

fn str_literal(value: &Expr) -> Option<String> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Some(s.value()),
        _ => None,
    }
}

/// Reports what keeps `item` from being wrapped; true if nothing does.
fn check_signature(entry: Entry, item: &ItemFn, errors: &mut Errors) -> bool {
    let attr = entry.attr();
    let sig = &item.sig;
    let name = &sig.ident;
    let mut ok = true;
    if sig.asyncness.is_none() {
        errors.push(
            sig.fn_token.span,
            format!("{attr} needs an `async fn`: write `async fn {name}`"),
        );
        ok = false;
    }
    if !sig.inputs.is_empty() || sig.variadic.is_some() {
        let message = match entry {
            Entry::Main => format!(
                "`{name}` cannot take arguments under {attr}; read command-line arguments with \
                 `std::env::args()`"
            ),
            Entry::Test => format!("a test cannot take arguments: {attr} calls `{name}()`"),
        };
        errors.push_spanned(&sig.inputs, message);
        ok = false;
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.push_spanned(
            &sig.generics,
            format!("{attr} cannot be applied to a generic function"),
        );
        ok = false;
    }
    if entry == Entry::Test {
        for a in &item.attrs {
            if a.path().is_ident("test") {
                errors.push_spanned(
                    a,
                    "remove this `#[test]`: #[rondo::test] already makes the function a test",
                );
                ok = false;
            }
        }
    }
    ok
}

fn generate(entry: Entry, options: &Options, item: ItemFn) -> TokenStream2 {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
        ..
    } = item;
    let krate = &options.krate;
    let name = &sig.ident;
    let output = &sig.output;
    let workers = options.workers.map(|n| quote!(.worker_threads(#n)));
    let paused = options.start_paused.then(|| quote!(.start_paused(true)));
    // With a shutdown timeout the runtime is shut down explicitly once the body's output is in
    // hand; without one, it is dropped as the expression ends.
    let finish = match options.shutdown_timeout {
        Some(nanos) => quote! {
            let output = runtime.block_on(body);
            runtime.shutdown_timeout(::core::time::Duration::from_nanos(#nanos));
            output
        },
        None => quote!(runtime.block_on(body)),
    };
    let failed = format!("{} could not start its runtime: {{}}", entry.attr());
    let test_attr = (entry == Entry::Test).then(|| quote!(#[::core::prelude::v1::test]));
    // Inner attributes (`#![allow(..)]` at the top of the body) stay inner: on the wrapper's body,
    // which holds the user's.
    let (inner, outer): (Vec<_>, Vec<_>) = attrs
        .into_iter()
        .partition(|a| matches!(a.style, syn::AttrStyle::Inner(_)));
    // The body becomes an async block in the wrapper, not a nested function, so that it sees what
    // the function saw (`Self` and the generics of an `impl` it is in); the block's output is
    // pinned to the declared return type, so `?` in it converts errors as in the function.
    let ret = match output {
        syn::ReturnType::Default => quote!(()),
        syn::ReturnType::Type(_, ty) => quote!(#ty),
    };
    quote! {
        #(#outer)*
        #test_attr
        #vis fn #name() #output {
            #(#inner)*
            let body = async move #block;
            let body: ::core::pin::Pin<&mut dyn ::core::future::Future<Output = #ret>> =
                ::core::pin::pin!(body);
            let runtime = #krate::Runtime::builder()
                #workers
                #paused
                .build()
                .unwrap_or_else(|e| ::core::panic!(#failed, e));
            #finish
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Entry, Errors, parse_options};
    use proc_macro2::TokenStream as TokenStream2;
    use quote::quote;

    /// The parsed options, as the worker count and the crate path's tokens, or every message.
    #[derive(Debug)]
    struct Parsed {
        workers: Option<usize>,
        krate: String,
    }

    fn options(entry: Entry, args: TokenStream2) -> Result<Parsed, String> {
        let mut errors = Errors::default();
        let o = parse_options(entry, args, &mut errors);
        let krate = &o.krate;
        match errors.0 {
            None => Ok(Parsed {
                workers: o.workers,
                krate: quote!(#krate).to_string(),
            }),
            Some(e) => Err(e
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n")),
        }
    }

    #[test]
    fn no_options_leave_the_builder_defaults() {
        let o = options(Entry::Main, quote!()).unwrap();
        assert_eq!(o.workers, None);
        assert_eq!(o.krate, quote!(::rondo).to_string());
    }

    #[test]
    fn flavors_map_to_worker_counts() {
        let o = options(Entry::Test, quote!(flavor = "current_thread")).unwrap();
        assert_eq!(o.workers, Some(1));
        let o = options(Entry::Test, quote!(flavor = "multi_thread")).unwrap();
        assert_eq!(o.workers, None);
        let o = options(
            Entry::Test,
            quote!(flavor = "multi_thread", worker_threads = 3),
        )
        .unwrap();
        assert_eq!(o.workers, Some(3));
    }

    #[test]
    fn start_paused_takes_a_bool() {
        let mut errors = Errors::default();
        let o = parse_options(Entry::Test, quote!(start_paused = true), &mut errors);
        assert!(errors.0.is_none() && o.start_paused);
        let o = parse_options(Entry::Main, quote!(start_paused = false), &mut errors);
        assert!(errors.0.is_none() && !o.start_paused);
        let e = options(Entry::Test, quote!(start_paused = "yes")).unwrap_err();
        assert!(e.contains("`start_paused` takes `true` or `false`"), "{e}");
        let e = options(Entry::Test, quote!(start_paused)).unwrap_err();
        assert!(e.contains("as in `start_paused = true`"), "{e}");
    }

    #[test]
    fn shutdown_timeout_takes_a_duration_with_a_unit() {
        let mut errors = Errors::default();
        for (text, nanos) in [
            ("250ms", 250_000_000),
            ("10s", 10_000_000_000),
            ("2m", 120_000_000_000),
            ("0s", 0),
        ] {
            let o = parse_options(Entry::Main, quote!(shutdown_timeout = #text), &mut errors);
            assert!(errors.0.is_none(), "{text}");
            assert_eq!(o.shutdown_timeout, Some(nanos), "{text}");
        }
        let o = parse_options(Entry::Main, quote!(), &mut errors);
        assert_eq!(o.shutdown_timeout, None);
        for (args, says) in [
            (quote!(shutdown_timeout = "10"), "has no unit"),
            (quote!(shutdown_timeout = "10h"), "unknown unit `h`"),
            (quote!(shutdown_timeout = "ms"), "needs a whole number"),
            (quote!(shutdown_timeout = "1.5s"), "unknown unit `.5s`"),
            (
                quote!(shutdown_timeout = "99999999999999m"),
                "at most 584 years",
            ),
            (
                quote!(shutdown_timeout = 10),
                "takes a duration as a string",
            ),
            (
                quote!(shutdown_timeout),
                "as in `shutdown_timeout = \"10s\"`",
            ),
        ] {
            let e = options(Entry::Main, args.clone()).unwrap_err();
            assert!(e.contains(says), "{args}: {e}");
        }
    }

    #[test]
    fn crate_path_is_parsed() {
        let o = options(Entry::Main, quote!(crate = "my::rondo")).unwrap();
        assert_eq!(o.krate, quote!(my::rondo).to_string());
    }

    #[test]
    fn every_bad_option_is_reported() {
        let e = options(
            Entry::Main,
            quote!(
                worker_threads = 0,
                flavor = "single",
                speed = 3,
                worker_threads = 2
            ),
        )
        .unwrap_err();
        assert!(e.contains("must be at least 1 (got 0)"), "{e}");
        assert!(e.contains("unknown flavor `single`"), "{e}");
        assert!(e.contains("unknown option `speed`"), "{e}");
        assert!(e.contains("`worker_threads` is given twice"), "{e}");
    }

    #[test]
    fn values_of_the_wrong_kind_are_refused() {
        for bad in [
            quote!(worker_threads = "4"),
            quote!(worker_threads = 2.5),
            quote!(worker_threads = -1),
            quote!(worker_threads = 99999999999999999999999),
        ] {
            let e = options(Entry::Main, bad.clone()).unwrap_err();
            assert!(e.contains("positive integer literal"), "{bad}: {e}");
        }
        let e = options(Entry::Main, quote!(flavor = current_thread)).unwrap_err();
        assert!(e.contains("`flavor` takes a string"), "{e}");
        let e = options(Entry::Main, quote!(crate = "not a path")).unwrap_err();
        assert!(e.contains("`crate` takes the path"), "{e}");
        let e = options(Entry::Main, quote!(worker_threads)).unwrap_err();
        assert!(e.contains("as in `worker_threads = 4`"), "{e}");
    }

    #[test]
    fn current_thread_and_worker_threads_conflict() {
        let e = options(
            Entry::Test,
            quote!(flavor = "current_thread", worker_threads = 2),
        )
        .unwrap_err();
        assert!(e.contains("cannot be combined"), "{e}");
    }
}
