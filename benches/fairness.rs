fn main() {
    eprintln!("benchmark fairness is being written; see BENCHMARKS.md");
}
