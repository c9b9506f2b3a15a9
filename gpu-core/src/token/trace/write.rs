//! Writing the text format: [`write_trace`] names stream `n` `sN`, event `n` `eN`, site `n`
//! `fN` and allocator `n` `aN`, so the parser reads back the same calls.

use alloc::string::String;
use core::fmt::{self, Write};

use super::memory::{CallKind, SiteId};
use super::op::TraceOp;

/// Writes operations in the text format, naming stream `n` `sN`, event `n` `eN`, call site `n`
/// `fN` and allocator `n` `aN`, so that [`parse_trace`](super::parse_trace) reads back the same
/// calls (if nothing follows an [`TraceOp::Exit`]: the format refuses that; and if each
/// [`TraceOp::Access`] follows its stream's operation, as the parser gives them: one that does
/// not is written as a line of its own, read back after a [`TraceOp::Launch`] of its own).
pub fn write_trace(ops: &[TraceOp]) -> String {
    let mut text = String::new();
    let mut at = 0;
    while let Some(op) = ops.get(at) {
        // Writing to a String cannot fail.
        let _ = match *op {
            TraceOp::Launch { .. } | TraceOp::PeerCopy { .. } | TraceOp::Access { .. } => {
                let footprint = footprint_after(ops, at);
                let _ = write_stream_op(&mut text, op, &ops[at + 1..at + 1 + footprint]);
                at += footprint;
                Ok(())
            }
            _ => write_op(&mut text, op),
        };
        at += 1;
    }
    text
}

/// How many [`TraceOp::Access`] ops after `ops[at]` one line holds with it: those of its
/// stream, of one call kind its line can have, and of one site.
fn footprint_after(ops: &[TraceOp], at: usize) -> usize {
    let (head_stream, allowed): (_, fn(CallKind) -> bool) = match ops[at] {
        TraceOp::Launch { stream, .. } => (stream, |call| call != CallKind::PeerCopy),
        TraceOp::PeerCopy { stream, .. } => (stream, |call| call == CallKind::PeerCopy),
        _ => return 0,
    };
    let mut first: Option<(CallKind, Option<SiteId>)> = None;
    ops[at + 1..]
        .iter()
        .take_while(|op| match **op {
            TraceOp::Access {
                stream, call, site, ..
            } if stream == head_stream && allowed(call) => {
                *first.get_or_insert((call, site)) == (call, site)
            }
            _ => false,
        })
        .count()
}

/// Writes a stream operation (or a lone access) with its footprint on one line.
fn write_stream_op(text: &mut String, op: &TraceOp, footprint: &[TraceOp]) -> fmt::Result {
    let lone;
    let (footprint, head) = match *op {
        TraceOp::Access { .. } => {
            lone = [*op];
            (&lone[..], None)
        }
        _ => (footprint, Some(op)),
    };
    let (call, site) = match footprint.first() {
        Some(&TraceOp::Access { call, site, .. }) => (call, site),
        _ => (CallKind::Launch, None),
    };
    match (head, footprint.first()) {
        (Some(&TraceOp::PeerCopy { stream, direct }), _) => {
            let path = if direct { "direct" } else { "staged" };
            write!(text, "peer_copy s{} {path}", stream.0)?;
        }
        (Some(&TraceOp::Launch { stream, device }), _) => {
            write!(text, "{} s{}", call.name(), stream.0)?;
            if let Some(device) = device {
                write!(text, " {}", device.0)?;
            }
        }
        (_, Some(&TraceOp::Access { stream, call, .. })) => {
            let call = if call == CallKind::PeerCopy {
                CallKind::Launch
            } else {
                call
            };
            write!(text, "{} s{}", call.name(), stream.0)?;
        }
        _ => {}
    }
    for access in footprint {
        if let TraceOp::Access { range, mode, .. } = *access {
            write!(text, " {}:{range}", mode.prefix())?;
        }
    }
    write_site(text, site)?;
    writeln!(text)
}

fn write_site(text: &mut String, site: Option<SiteId>) -> fmt::Result {
    match site {
        Some(site) => write!(text, " @f{}", site.0),
        None => Ok(()),
    }
}

/// Writes one operation that is not a stream operation with a footprint.
fn write_op(text: &mut String, op: &TraceOp) -> fmt::Result {
    match *op {
        TraceOp::CreateStream { stream, device } => {
            writeln!(text, "stream_create s{} {}", stream.0, device.0)
        }
        TraceOp::DestroyStream { stream } => writeln!(text, "stream_destroy s{}", stream.0),
        TraceOp::CreateEvent { event, device } => {
            writeln!(text, "event_create e{} {}", event.0, device.0)
        }
        TraceOp::DestroyEvent { event } => writeln!(text, "event_destroy e{}", event.0),
        TraceOp::Record { event, stream } => {
            writeln!(text, "event_record e{} s{}", event.0, stream.0)
        }
        TraceOp::Wait { stream, event } => {
            writeln!(text, "stream_wait_event s{} e{}", stream.0, event.0)
        }
        TraceOp::SynchronizeStream { stream } => {
            writeln!(text, "stream_synchronize s{}", stream.0)
        }
        TraceOp::SynchronizeEvent { event } => writeln!(text, "event_synchronize e{}", event.0),
        TraceOp::QueryStream { stream } => writeln!(text, "stream_query s{}", stream.0),
        TraceOp::QueryEvent { event } => writeln!(text, "event_query e{}", event.0),
        TraceOp::DefaultStream { stream, device } => {
            writeln!(text, "stream_default s{} {}", stream.0, device.0)
        }
        TraceOp::Exit => writeln!(text, "exit"),
        TraceOp::SetStreamKind { stream, kind } => {
            writeln!(text, "stream_kind s{} {}", stream.0, kind.word())
        }
        TraceOp::SynchronizeDevice { device } => {
            writeln!(text, "device_synchronize {}", device.0)
        }
        TraceOp::Alloc {
            range,
            stream,
            site,
        } => {
            write!(text, "mem_alloc {range}")?;
            write_end(text, stream.map(|s| s.0), site)
        }
        TraceOp::Free {
            address,
            stream,
            site,
        } => {
            write!(text, "mem_free {address:#x}")?;
            write_end(text, stream.map(|s| s.0), site)
        }
        TraceOp::BlockAlloc {
            allocator,
            range,
            stream,
            site,
        } => {
            write!(text, "block_alloc a{} {range}", allocator.0)?;
            write_end(text, Some(stream.0), site)
        }
        TraceOp::BlockFree {
            allocator,
            address,
            stream,
            site,
        }
        | TraceOp::BlockUse {
            allocator,
            address,
            stream,
            site,
        } => {
            let call = if matches!(op, TraceOp::BlockFree { .. }) {
                "block_free"
            } else {
                "block_use"
            };
            write!(text, "{call} a{} {address:#x}", allocator.0)?;
            write_end(text, Some(stream.0), site)
        }
        TraceOp::Launch { .. } | TraceOp::PeerCopy { .. } | TraceOp::Access { .. } => {
            write_stream_op(text, op, &[])
        }
    }
}

/// The optional stream and site of a memory line, and its end.
fn write_end(text: &mut String, stream: Option<u32>, site: Option<SiteId>) -> fmt::Result {
    if let Some(stream) = stream {
        write!(text, " s{stream}")?;
    }
    write_site(text, site)?;
    writeln!(text)
}
