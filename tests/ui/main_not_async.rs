#[rondo::main]
fn main() {}
