//! Writing the text format: [`write_trace`] names stream `n` `sN` and event `n` `eN`, so the
//! parser reads back the same calls.

use alloc::string::String;
use core::fmt::Write;

use super::op::TraceOp;

/// Writes operations in the text format, naming stream `n` `sN` and event `n` `eN`, so that
/// [`parse_trace`](super::parse_trace) reads back the same calls (if nothing follows an [`TraceOp::Exit`]: the
/// format refuses that).
pub fn write_trace(ops: &[TraceOp]) -> String {
    let mut text = String::new();
    for op in ops {
        // Writing to a String cannot fail.
        let _ = match *op {
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
            TraceOp::SynchronizeEvent { event } => {
                writeln!(text, "event_synchronize e{}", event.0)
            }
            TraceOp::QueryStream { stream } => writeln!(text, "stream_query s{}", stream.0),
            TraceOp::QueryEvent { event } => writeln!(text, "event_query e{}", event.0),
            TraceOp::Launch {
                stream,
                device: Some(device),
            } => writeln!(text, "launch s{} {}", stream.0, device.0),
            TraceOp::Launch {
                stream,
                device: None,
            } => writeln!(text, "launch s{}", stream.0),
            TraceOp::PeerCopy { stream, direct } => {
                let path = if direct { "direct" } else { "staged" };
                writeln!(text, "peer_copy s{} {path}", stream.0)
            }
            TraceOp::DefaultStream { stream, device } => {
                writeln!(text, "stream_default s{} {}", stream.0, device.0)
            }
            TraceOp::Exit => writeln!(text, "exit"),
        };
    }
    text
}
