//! Small `Copy` handles shared by every pure module: devices, streams, events.
//! Raw driver handles never appear here; backends map these ids to their own objects.

use core::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u32);

        impl $name {
            /// The id as an index into per-object tables.
            #[inline]
            pub const fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// A device of one backend, numbered from 0 in the backend's enumeration order.
    DeviceId,
    "device "
);
id_type!(
    /// An in-order queue of work on one device.
    StreamId,
    "stream "
);
id_type!(
    /// A completion marker recorded on a stream and waited on by other streams.
    EventId,
    "event "
);
