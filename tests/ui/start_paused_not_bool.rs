#[rondo::test(start_paused = 1)]
async fn paused() {}

fn main() {}
