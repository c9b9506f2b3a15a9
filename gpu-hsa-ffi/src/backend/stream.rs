//! A stream's state: its user-mode AQL queue and the chain of operations enqueued on it, each
//! with a completion signal; and the one place that writes packets into a queue's ring.
//!
//! HSA has no streams. Order comes from two rules: every packet carries the barrier bit (a
//! queue runs its packets one after another), and work off the queue (DMA copies) or a queue
//! packet after such work names the previous operation's signal as a dependency. Operations
//! therefore complete in the order they were enqueued, which is what lets a signal be reused
//! once the operation after it has completed: nothing enqueued later can still read it.

use core::sync::atomic::{AtomicU32, Ordering};
use std::collections::VecDeque;

use gpu_core::{DeviceId, Result};

use super::packets::header_word;
use crate::library::Hsa;
use crate::sys;

/// One operation of a stream: its completion signal (1 while it runs, 0 once done), whether it
/// is a packet of the stream's queue, the host buffer it reads (kernel arguments, a fill
/// pattern), freed once the signal may be reused, and the event record's signal it waits for
/// (a barrier of `stream_wait_event`), released at the same time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Op {
    pub(crate) signal: sys::hsa_signal_t,
    pub(crate) on_queue: bool,
    pub(crate) scratch: Option<usize>,
    pub(crate) waits_on: Option<sys::hsa_signal_t>,
}

/// A stream: its queue (created by the backend, or adopted and never destroyed), its device,
/// and its operations not yet known to be complete, oldest first.
#[derive(Debug)]
pub(crate) struct StreamState {
    pub(crate) queue: *mut sys::hsa_queue_t,
    pub(crate) device: DeviceId,
    pub(crate) adopted: bool,
    pub(crate) chain: VecDeque<Op>,
    /// An event record was submitted after the chain's last operation: the queue's last packet
    /// completes a record's signal, not a chain signal, so a synchronisation first adds a
    /// marker to the chain (every packet has the barrier bit: it completes after the record).
    pub(crate) record_after_chain: bool,
}

// SAFETY: the queue pointer is HSA's queue object, used only under the stream's mutex; HSA
// queues may be written from any thread.
unsafe impl Send for StreamState {}

impl StreamState {
    /// The signals a new operation must wait for besides queue order: the previous
    /// operation's, unless both are packets of the queue (the barrier bit orders those).
    pub(crate) fn dependencies(&self, on_queue: bool) -> Vec<sys::hsa_signal_t> {
        self.chain
            .back()
            .filter(|last| !(on_queue && last.on_queue))
            .map(|last| last.signal)
            .into_iter()
            .collect()
    }

    /// Removes from the front the operations whose signals nothing can read any more, given
    /// `done` (whether an operation has completed): every operation before a completed one,
    /// and the last one once it has completed. Returns them, oldest first.
    pub(crate) fn retire(&mut self, mut done: impl FnMut(&Op) -> bool) -> Vec<Op> {
        let mut retired = Vec::new();
        while self.chain.len() >= 2 && done(&self.chain[1]) {
            retired.extend(self.chain.pop_front());
        }
        if self.chain.len() == 1 && done(&self.chain[0]) {
            retired.extend(self.chain.pop_front());
        }
        retired
    }
}

/// A packet ready to be written: its 64 bytes with the header word zero, and the header word
/// the producer stores last.
pub(crate) struct Packet {
    body: [u8; 64],
    header: u32,
}

impl Packet {
    /// A packet from an AQL packet struct (64 bytes) and its header word.
    pub(crate) fn new<T: Copy>(packet: &T, header: u16, setup: u16) -> Self {
        const { assert!(size_of::<T>() == 64, "AQL packets are 64 bytes") };
        let mut body = [0u8; 64];
        // SAFETY: `T` is a plain 64-byte `repr(C)` packet struct (checked above), read as bytes.
        unsafe {
            core::ptr::copy_nonoverlapping((packet as *const T).cast::<u8>(), body.as_mut_ptr(), 64)
        };
        Self {
            body,
            header: header_word(header, setup),
        }
    }
}

/// The functions [`Producer::submit`] calls, looked up first so that nothing can fail once a slot of the
/// ring has been reserved.
pub(crate) struct Producer {
    reserve: sys::PFN_hsa_queue_add_write_index_screlease,
    read_index: sys::PFN_hsa_queue_load_read_index_scacquire,
    ring: sys::PFN_hsa_signal_store_screlease,
}

impl Producer {
    /// Looks the functions up.
    pub(crate) fn new(hsa: &Hsa) -> Result<Self> {
        Ok(Self {
            reserve: hsa.hsa_queue_add_write_index_screlease()?,
            read_index: hsa.hsa_queue_load_read_index_scacquire()?,
            ring: hsa.hsa_signal_store_screlease()?,
        })
    }

    /// Writes `packets` into `queue`, in order: for each, reserves a slot (waiting while the
    /// ring is full), writes the body, stores the header word with release ordering (the
    /// packet processor reads a packet once its header is valid), and rings the doorbell.
    ///
    /// # Safety
    /// `queue` is a live HSA queue; the packets' signals, kernel objects and kernarg buffers
    /// stay valid until the packets have completed.
    pub(crate) unsafe fn submit(&self, queue: *mut sys::hsa_queue_t, packets: &[Packet]) {
        // SAFETY: the caller's promise: a live queue, whose fields HSA fixed at creation.
        let (base, size, doorbell) = unsafe {
            let queue = &*queue;
            (
                queue.base_address.cast::<u8>(),
                u64::from(queue.size),
                queue.doorbell_signal,
            )
        };
        for packet in packets {
            // SAFETY: a live queue; HSA's atomic index functions.
            let index = unsafe { (self.reserve)(queue, 1) };
            // SAFETY: a live queue; HSA's atomic read-index function.
            while index - unsafe { (self.read_index)(queue) } >= size {
                std::thread::yield_now();
            }
            // SAFETY: slot `index % size` of the ring is this producer's until the header is
            // stored; the ring holds `size` 64-byte packets from `base`, aligned to 64 bytes.
            unsafe {
                let slot = base.add(((index % size) * 64) as usize);
                core::ptr::copy_nonoverlapping(packet.body.as_ptr().add(4), slot.add(4), 60);
                AtomicU32::from_ptr(slot.cast::<u32>()).store(packet.header, Ordering::Release);
                (self.ring)(doorbell, index as sys::hsa_signal_value_t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(handle: u64, on_queue: bool) -> Op {
        Op {
            signal: sys::hsa_signal_t { handle },
            on_queue,
            scratch: None,
            waits_on: None,
        }
    }

    fn stream(ops: &[Op]) -> StreamState {
        StreamState {
            queue: core::ptr::null_mut(),
            device: DeviceId(0),
            adopted: false,
            chain: ops.iter().copied().collect(),
            record_after_chain: false,
        }
    }

    #[test]
    fn queue_packets_after_queue_packets_need_no_signal_and_everything_else_does() {
        let empty = stream(&[]);
        assert!(empty.dependencies(true).is_empty());
        assert!(empty.dependencies(false).is_empty());
        let after_kernel = stream(&[op(1, false), op(2, true)]);
        assert!(after_kernel.dependencies(true).is_empty());
        assert_eq!(after_kernel.dependencies(false)[0].handle, 2);
        let after_copy = stream(&[op(1, true), op(2, false)]);
        assert_eq!(after_copy.dependencies(true)[0].handle, 2);
        assert_eq!(after_copy.dependencies(false)[0].handle, 2);
    }

    #[test]
    fn an_operation_retires_once_the_one_after_it_completed_and_the_last_once_it_did() {
        let handles = |ops: &[Op]| ops.iter().map(|o| o.signal.handle).collect::<Vec<_>>();
        for completed in 0..=4u64 {
            let mut state = stream(&[op(1, true), op(2, false), op(3, true), op(4, false)]);
            // Operations complete in order: 1..=completed are done.
            let retired = state.retire(|o| o.signal.handle <= completed);
            let expected: Vec<u64> = match completed {
                0 | 1 => vec![],
                4 => vec![1, 2, 3, 4],
                n => (1..n).collect(),
            };
            assert_eq!(handles(&retired), expected, "{completed} completed");
            let left: Vec<u64> = state.chain.iter().map(|o| o.signal.handle).collect();
            assert_eq!(
                left,
                (expected.len() as u64 + 1..=4).collect::<Vec<_>>(),
                "{completed} completed"
            );
        }
        let mut one = stream(&[op(9, true)]);
        assert!(one.retire(|_| false).is_empty());
        assert_eq!(handles(&one.retire(|_| true)), [9]);
        assert!(one.chain.is_empty());
    }

    #[test]
    fn a_packet_keeps_its_body_and_stores_the_header_word_apart() {
        let mut barrier = sys::hsa_barrier_and_packet_t::default();
        barrier.dep_signal[0].handle = 0x0102_0304_0506_0708;
        barrier.completion_signal.handle = 0xAA;
        let packet = Packet::new(&barrier, 0x1503, 0);
        assert_eq!(packet.header, 0x1503);
        assert_eq!(&packet.body[8..16], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&packet.body[56..64], &0xAAu64.to_le_bytes());
        assert_eq!(&packet.body[..4], &[0; 4], "the header is not in the body");
    }

    /// A queue in plain memory: HSA's queue struct first (so the producer's functions can find
    /// the rest from its address), the ring, and the indices and doorbell a packet processor
    /// would keep.
    #[repr(C)]
    struct FakeQueue {
        queue: sys::hsa_queue_t,
        write: core::sync::atomic::AtomicU64,
        read: core::sync::atomic::AtomicU64,
        doorbell: core::sync::atomic::AtomicI64,
    }

    #[repr(C, align(64))]
    struct Ring([u8; 64 * 4]);

    unsafe extern "C" fn reserve(queue: *const sys::hsa_queue_t, count: u64) -> u64 {
        // SAFETY: the queue is the first field of a live FakeQueue.
        unsafe { &*queue.cast::<FakeQueue>() }
            .write
            .fetch_add(count, Ordering::AcqRel)
    }

    unsafe extern "C" fn read_index(queue: *const sys::hsa_queue_t) -> u64 {
        // SAFETY: the queue is the first field of a live FakeQueue (the producer is given no
        // other queue).
        unsafe { &*queue.cast::<FakeQueue>() }
            .read
            .load(Ordering::Acquire)
    }

    unsafe extern "C" fn ring_doorbell(doorbell: sys::hsa_signal_t, value: i64) {
        // SAFETY: the fake queues put their own address in the doorbell's handle.
        unsafe { &*(doorbell.handle as *const FakeQueue) }
            .doorbell
            .store(value, Ordering::Release)
    }

    fn fake_queue(ring: &mut Ring, slots: u32) -> Box<FakeQueue> {
        let mut fake = Box::new(FakeQueue {
            queue: sys::hsa_queue_t {
                base_address: ring.0.as_mut_ptr().cast(),
                size: slots,
                ..Default::default()
            },
            write: 0.into(),
            read: 0.into(),
            doorbell: (-1).into(),
        });
        fake.queue.doorbell_signal.handle = &*fake as *const FakeQueue as u64;
        fake
    }

    fn producer() -> Producer {
        Producer {
            reserve,
            read_index,
            ring: ring_doorbell,
        }
    }

    /// A barrier packet whose first dependency is `n`, to tell packets apart.
    fn numbered(n: u64) -> Packet {
        let mut barrier = sys::hsa_barrier_and_packet_t::default();
        barrier.dep_signal[0].handle = n;
        Packet::new(&barrier, 0x1503, 0)
    }

    #[test]
    fn packets_land_in_order_with_their_headers_and_the_doorbell_names_the_last() {
        let mut ring = Ring([0; 256]);
        let fake = fake_queue(&mut ring, 4);
        let queue = &fake.queue as *const sys::hsa_queue_t as *mut sys::hsa_queue_t;
        // SAFETY: a live fake queue; the packets name no real signal (nothing processes them).
        unsafe { producer().submit(queue, &[numbered(10), numbered(11), numbered(12)]) };
        assert_eq!(fake.write.load(Ordering::Acquire), 3);
        assert_eq!(fake.doorbell.load(Ordering::Acquire), 2);
        drop(fake);
        for (slot, n) in [(0usize, 10u64), (1, 11), (2, 12)] {
            let packet = &ring.0[slot * 64..slot * 64 + 64];
            assert_eq!(&packet[..4], &0x1503u32.to_le_bytes(), "slot {slot}");
            assert_eq!(&packet[8..16], &n.to_le_bytes(), "slot {slot}");
        }
        assert_eq!(&ring.0[192..256], &[0; 64], "slot 3 untouched");
    }

    #[test]
    fn a_full_ring_waits_for_the_packet_processor_and_wraps_around() {
        let mut ring = Ring([0; 256]);
        let fake = fake_queue(&mut ring, 2);
        let queue = &fake.queue as *const sys::hsa_queue_t as *mut sys::hsa_queue_t;
        let base = ring.0.as_mut_ptr() as usize;
        let packets: Vec<Packet> = (1..=7).map(numbered).collect();
        let seen = std::thread::scope(|scope| {
            let processor = scope.spawn(|| {
                // The packet processor: takes each packet once its header is stored, clears
                // the header, and moves the read index on.
                let mut seen = Vec::new();
                for index in 0..7u64 {
                    let slot = base + ((index % 2) * 64) as usize;
                    // SAFETY: the ring is live until the scope ends; the header is read
                    // atomically, the body after it with acquire ordering.
                    let header = unsafe { AtomicU32::from_ptr(slot as *mut u32) };
                    while header.load(Ordering::Acquire) == 0 {
                        std::thread::yield_now();
                    }
                    // SAFETY: the producer wrote the body before the header.
                    let first = unsafe { ((slot + 8) as *const u64).read() };
                    seen.push(first);
                    header.store(0, Ordering::Release);
                    fake.read.store(index + 1, Ordering::Release);
                }
                seen
            });
            // SAFETY: a live fake queue, consumed by the thread above.
            unsafe { producer().submit(queue, &packets) };
            processor.join().unwrap()
        });
        assert_eq!(seen, (1..=7).collect::<Vec<_>>());
        assert_eq!(fake.write.load(Ordering::Acquire), 7);
        assert_eq!(fake.doorbell.load(Ordering::Acquire), 6);
    }
}
