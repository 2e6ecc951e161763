//! The FIFO line of waiters shared by [`AsyncOneManyLock`](super::AsyncOneManyLock) and
//! [`Semaphore`](super::Semaphore).
//!
//! The line is a doubly linked list threaded through a [`Slab`], so a waiter can leave from the middle
//! in O(1) when its future is dropped. A node stays in the slab after it is granted (it is only
//! unlinked from the line) until the future that owns its key removes it; keys are therefore never
//! reused while a future still refers to them. All of this lives inside the primitive's internal
//! mutex: nothing here is atomic.

use core::task::Waker;
use slab::Slab;

/// Marks "no node" in the `prev`/`next` links.
const NIL: usize = usize::MAX;

/// Where a waiter stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// In the line, not yet served.
    Waiting,
    /// Served: ownership (a shared or exclusive hold, or permits) was handed to this waiter. Whoever
    /// owns the key must either use the grant or give it back.
    Granted,
    /// The semaphore was closed while this waiter stood in line; nothing was granted.
    Closed,
    /// Admitting this reader would overflow the reader count; nothing was granted and the waiter's
    /// poll panics with a clear message.
    Overflow,
}

struct Node<R> {
    request: R,
    waker: Option<Waker>,
    status: Status,
    prev: usize,
    next: usize,
}

/// Wakers collected while the internal lock is held and called after it is released.
///
/// The first waker is stored inline, so the common single hand-off does not allocate.
#[derive(Default)]
pub(crate) struct WakeList {
    first: Option<Waker>,
    rest: Vec<Waker>,
}

impl WakeList {
    pub(crate) const fn new() -> Self {
        WakeList {
            first: None,
            rest: Vec::new(),
        }
    }

    fn push(&mut self, waker: Waker) {
        if self.first.is_none() {
            self.first = Some(waker);
        } else {
            self.rest.push(waker);
        }
    }

    /// Calls every collected waker. Must be called with no internal lock held.
    pub(crate) fn wake_all(self) {
        if let Some(w) = self.first {
            w.wake();
        }
        for w in self.rest {
            w.wake();
        }
    }
}

/// A FIFO line of waiters, each asking for an `R` (a lock mode, or a number of permits).
pub(crate) struct WaitList<R> {
    nodes: Slab<Node<R>>,
    head: usize,
    tail: usize,
}

impl<R: Copy> WaitList<R> {
    pub(crate) const fn new() -> Self {
        WaitList {
            nodes: Slab::new(),
            head: NIL,
            tail: NIL,
        }
    }

    /// Joins the back of the line; returns the key that identifies this waiter.
    pub(crate) fn push_back(&mut self, request: R, waker: Waker) -> usize {
        let key = self.nodes.insert(Node {
            request,
            waker: Some(waker),
            status: Status::Waiting,
            prev: self.tail,
            next: NIL,
        });
        if self.tail == NIL {
            self.head = key;
        } else {
            self.nodes[self.tail].next = key;
        }
        self.tail = key;
        key
    }

    /// The request of the waiter at the head of the line.
    pub(crate) fn head(&self) -> Option<R> {
        (self.head != NIL).then(|| self.nodes[self.head].request)
    }

    fn unlink(&mut self, key: usize) {
        let (prev, next) = {
            let n = &self.nodes[key];
            (n.prev, n.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next].prev = prev;
        }
        let n = &mut self.nodes[key];
        n.prev = NIL;
        n.next = NIL;
    }

    /// Takes the head out of the line with the given final status and queues its waker.
    pub(crate) fn finish_head(&mut self, status: Status, wakers: &mut WakeList) {
        let key = self.head;
        debug_assert_ne!(key, NIL);
        self.unlink(key);
        let node = &mut self.nodes[key];
        node.status = status;
        if let Some(w) = node.waker.take() {
            wakers.push(w);
        }
    }

    /// Closes every waiter in line (semaphore `close`).
    pub(crate) fn close_all(&mut self, wakers: &mut WakeList) {
        while self.head != NIL {
            self.finish_head(Status::Closed, wakers);
        }
    }

    /// Checks on a waiter from its future's `poll`. If it is still waiting, its waker is refreshed and
    /// `Status::Waiting` returned; otherwise the node is removed and its final status returned.
    pub(crate) fn poll(&mut self, key: usize, waker: &Waker) -> Status {
        let node = &mut self.nodes[key];
        match node.status {
            Status::Waiting => {
                match &mut node.waker {
                    Some(w) if w.will_wake(waker) => {}
                    slot => *slot = Some(waker.clone()),
                }
                Status::Waiting
            }
            status => {
                self.nodes.remove(key);
                status
            }
        }
    }

    /// Removes a waiter whose future is being dropped; returns its status at that moment and its
    /// request. A `Granted` result means the caller must give the grant back.
    pub(crate) fn remove(&mut self, key: usize) -> (Status, R) {
        if self.nodes[key].status == Status::Waiting {
            self.unlink(key);
        }
        let node = self.nodes.remove(key);
        (node.status, node.request)
    }
}
