fn main() {
    eprintln!("benchmark sync is being written; see BENCHMARKS.md");
}
