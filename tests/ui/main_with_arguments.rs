#[rondo::main]
async fn main(port: u16) {
    let _ = port;
}
