#[rondo::test]
fn adds() {
    assert_eq!(1 + 1, 2);
}

fn main() {}
