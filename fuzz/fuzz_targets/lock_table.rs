//! The lock table against its brute-force model, on operation sequences from the fuzzer:
//! the same harness as the property test (`gpu_core::lock_table::model`), another driver.
#![no_main]

use arbitrary::Arbitrary;
use gpu_core::lock_table::LockOwner;
use gpu_core::lock_table::model::{CallKind, Harness, Op, UnlockBy};
use libfuzzer_sys::fuzz_target;

/// Where an address falls: a small arena (so ranges collide often) or the top of memory.
#[derive(Arbitrary, Debug)]
enum Place {
    Arena(u8),
    Top(u8),
    Anywhere(usize),
}

impl Place {
    fn address(&self) -> usize {
        match *self {
            Place::Arena(offset) => 0x1000 + offset as usize,
            Place::Top(offset) => usize::MAX - offset as usize,
            Place::Anywhere(ptr) => ptr,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Length {
    Short(u8),
    Any(usize),
}

impl Length {
    fn bytes(&self) -> usize {
        match *self {
            Length::Short(len) => len as usize,
            Length::Any(len) => len,
        }
    }
}

/// Who takes a lock.
#[derive(Arbitrary, Debug)]
enum Owner {
    Raw,
    Guard,
}

impl Owner {
    fn owner(&self) -> LockOwner {
        match self {
            Owner::Raw => LockOwner::Raw,
            Owner::Guard => LockOwner::Guard,
        }
    }
}

/// Which unlock call releases which kind of lock.
#[derive(Arbitrary, Debug)]
enum By {
    Raw,
    RawExact,
    Guard,
}

impl By {
    fn by(&self) -> UnlockBy {
        match self {
            By::Raw => UnlockBy::Raw,
            By::RawExact => UnlockBy::RawExact,
            By::Guard => UnlockBy::Guard,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum FuzzOp {
    Lock(Place, Length, Owner),
    Unlock(Place, By),
    Lookup(Place, Length, u8),
    FailPin,
    FailUnpin,
    FailQuery,
    PinElsewhere(Place, u8),
}

fuzz_target!(|input: (u8, Vec<FuzzOp>)| {
    let (devices, ops) = input;
    let mut harness = Harness::new(1 + devices as usize % 3);
    for op in ops {
        let op = match op {
            FuzzOp::Lock(at, len, owner) => Op::Lock {
                ptr: at.address(),
                len: len.bytes(),
                owner: owner.owner(),
            },
            FuzzOp::Unlock(at, by) => Op::Unlock {
                ptr: at.address(),
                by: by.by(),
            },
            FuzzOp::Lookup(at, len, device) => Op::Lookup {
                ptr: at.address(),
                len: len.bytes(),
                device: u32::from(device % 4),
            },
            FuzzOp::FailPin => Op::FailNext(CallKind::Pin),
            FuzzOp::FailUnpin => Op::FailNext(CallKind::Unpin),
            FuzzOp::FailQuery => Op::FailNext(CallKind::Query),
            FuzzOp::PinElsewhere(at, len) => Op::PinElsewhere {
                ptr: at.address(),
                len: len as usize,
            },
        };
        harness.apply(op);
    }
});
