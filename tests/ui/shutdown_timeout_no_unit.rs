#[rondo::main(shutdown_timeout = "10")]
async fn main() {}
