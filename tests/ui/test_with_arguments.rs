#[rondo::test]
async fn adds(n: u32) {
    assert_eq!(n + n, 2 * n);
}

fn main() {}
