#[rondo::main]
struct Server;

fn main() {}
