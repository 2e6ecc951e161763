#[rondo::test(flavor = "single_thread")]
async fn adds() {
    assert_eq!(1 + 1, 2);
}

fn main() {}
