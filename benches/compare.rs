fn main() {
    eprintln!("benchmark compare is being written; see BENCHMARKS.md");
}
