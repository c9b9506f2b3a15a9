//! A plan seen as a trace: its steps as the stream/event calls the checker reads, with pool
//! acquire and release shown as create and destroy ([`TraceView::Logical`]) or not at all.

use alloc::vec::Vec;

use super::steps::PlanStep;
use crate::token::trace::TraceOp;

/// Which calls a plan's trace shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceView {
    /// Pool acquire and release as create and destroy: checks that the plan never uses a
    /// stream or event it has given back to its pool, nor gives one back twice.
    Logical,
    /// Only driver calls: a fresh acquire creates, a pool drain destroys, pooled acquire and
    /// release are not calls; checks that every driver object is destroyed exactly once.
    Driver,
}

/// The trace of a plan's steps, as seen in `view`.
pub fn plan_trace(steps: &[PlanStep], view: TraceView) -> Vec<TraceOp> {
    let logical = view == TraceView::Logical;
    steps
        .iter()
        .filter_map(|step| match *step {
            PlanStep::AcquireStream {
                device,
                stream,
                fresh,
            } => (logical || fresh).then_some(TraceOp::CreateStream { stream, device }),
            PlanStep::ReleaseStream { stream, .. } => {
                logical.then_some(TraceOp::DestroyStream { stream })
            }
            PlanStep::DestroyStream { stream, .. } => {
                (!logical).then_some(TraceOp::DestroyStream { stream })
            }
            PlanStep::AcquireEvent {
                device,
                event,
                fresh,
            } => (logical || fresh).then_some(TraceOp::CreateEvent { event, device }),
            PlanStep::ReleaseEvent { event, .. } => {
                logical.then_some(TraceOp::DestroyEvent { event })
            }
            PlanStep::DestroyEvent { event, .. } => {
                (!logical).then_some(TraceOp::DestroyEvent { event })
            }
            PlanStep::Record { event, stream } => Some(TraceOp::Record { event, stream }),
            PlanStep::Wait { stream, event } => Some(TraceOp::Wait { stream, event }),
            PlanStep::Run { device, stream, .. } => Some(TraceOp::Launch {
                stream,
                device: Some(device),
            }),
            PlanStep::SynchronizeStream { stream } => Some(TraceOp::SynchronizeStream { stream }),
            PlanStep::SynchronizeEvent { event } => Some(TraceOp::SynchronizeEvent { event }),
        })
        .collect()
}
