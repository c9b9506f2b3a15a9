//! Reference model of the planner, shared by the property tests and the fuzz targets: runs a
//! token program and checks its plan against a brute-force happens-before and a simulation.
//!
//! Nothing here reuses the planner's bookkeeping: the expected wait count comes from a
//! transitive closure over the emitted steps, and the simulation executes the steps as
//! in-order streams with random interleaving.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use super::{OpId, PlanStep, Planner, Token, TokenId, TraceView, UnwaitedKind, check, plan_trace};
use crate::error::Error;
use crate::id::{DeviceId, EventId, StreamId};

/// One instruction of a token program. Token operands are indexes into the live tokens,
/// taken modulo their number (an instruction that needs a token when none is live does
/// nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Instr {
    /// An operation on `device` (modulo the device count) after the tokens at `deps`
    /// (duplicates removed).
    Run {
        /// Device index.
        device: u8,
        /// Live-token indexes.
        deps: Vec<u16>,
    },
    /// A join of the tokens at `deps` (duplicates removed).
    Join {
        /// Live-token indexes.
        deps: Vec<u16>,
    },
    /// A fork of one token into `count` (at least 1).
    Fork {
        /// Live-token index.
        token: u16,
        /// Branch count.
        count: u8,
    },
    /// A detached fork of one token into `count` (at least 1): no branch keeps the stream
    /// (MLIR's event records).
    ForkDetached {
        /// Live-token index.
        token: u16,
        /// Branch count.
        count: u8,
    },
    /// A synchronous wait on one token.
    Wait {
        /// Live-token index.
        token: u16,
    },
    /// A discard of one token.
    Discard {
        /// Live-token index.
        token: u16,
    },
    /// A call that must fail and leave the planner unchanged (`kind` picks which: a consumed
    /// token, a foreign one, an unknown id, a token given twice, a fork into zero, an empty
    /// join, an unknown device).
    Misuse {
        /// Which misuse (modulo the number of kinds).
        kind: u8,
        /// Live-token index of a valid token given alongside, where one is live.
        token: u16,
    },
    /// Ends the program (outstanding tokens reported) and starts the next on warm pools.
    EndProgram,
}

/// Counts from a checked program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Operations run.
    pub ops: usize,
    /// Waits emitted.
    pub waits: usize,
    /// Streams created because a pool was empty.
    pub fresh_streams: usize,
    /// Events created because a pool was empty.
    pub fresh_events: usize,
    /// Tokens reported as discarded or outstanding.
    pub unwaited: usize,
    /// Misuses rejected.
    pub misuses: usize,
}

struct LiveToken {
    token: Token,
    /// The plan step index of the token's point (its last run or wait).
    point: usize,
    /// The operations whose completion the token stands for.
    ops: Vec<u32>,
}

/// A run or join call: which steps it emitted, on which stream, after which points.
struct Call {
    start: usize,
    end: usize,
    target: StreamId,
    points: Vec<usize>,
}

struct Runner {
    planner: Planner,
    /// A second planner, for foreign tokens.
    other: Planner,
    device_count: usize,
    plan: Vec<PlanStep>,
    live: Vec<LiveToken>,
    consumed: Vec<TokenId>,
    calls: Vec<Call>,
    /// Per operation: the operations it must start after.
    op_deps: Vec<Vec<u32>>,
    discarded_since_end: usize,
    /// Tokens the planner called complete, each once: (id, its point, the plan's length then).
    completed: Vec<(TokenId, usize, usize)>,
    summary: Summary,
}

/// Runs `program` on a planner for `device_count` devices (1 to 3 used), ends it, drains the
/// pools, and checks every property: every call succeeds (misuses fail with the right error
/// and leave the planner unchanged), the plan passes the checker in both trace views, each
/// call waits exactly for the dependencies the plan does not already imply (brute force), the
/// end report names every unwaited token, every token the planner calls complete
/// ([`Planner::completed`]) was covered by a host synchronisation planned before (brute
/// force), and a simulated execution with interleaving from `seed` starts no operation before
/// its dependencies finished.
pub fn check_program(device_count: usize, program: &[Instr], seed: u64) -> Result<Summary, String> {
    let device_count = device_count.clamp(1, 3);
    let mut runner = Runner {
        planner: Planner::new(device_count),
        other: Planner::new(1),
        device_count,
        plan: Vec::new(),
        live: Vec::new(),
        consumed: Vec::new(),
        calls: Vec::new(),
        op_deps: Vec::new(),
        discarded_since_end: 0,
        completed: Vec::new(),
        summary: Summary::default(),
    };
    for instr in program {
        runner.step(instr)?;
        runner.note_completed()?;
    }
    runner.end_program()?;
    runner.planner.drain_pools();
    runner.collect_steps();
    runner.check_plan(seed)?;
    Ok(runner.summary)
}

/// Runs `program` twice on one single-device planner and returns the streams and events the
/// second run created (pools are warm then: a structurally identical program needs no new
/// stream, and at most one more event for a wait the first run found implied).
pub fn rerun_creations(program: &[Instr]) -> Result<(usize, usize), String> {
    let first = check_program(1, program, 1)?;
    let mut twice = program.to_vec();
    twice.push(Instr::EndProgram);
    twice.extend_from_slice(program);
    let both = check_program(1, &twice, 1)?;
    Ok((
        both.fresh_streams - first.fresh_streams,
        both.fresh_events - first.fresh_events,
    ))
}

impl Runner {
    fn collect_steps(&mut self) {
        self.plan.extend(self.planner.drain_steps());
    }

    fn pick(&self, index: u16) -> Option<usize> {
        (!self.live.is_empty()).then(|| index as usize % self.live.len())
    }

    /// Removes the live tokens at `indexes` (modulo, duplicates dropped), in the given order.
    fn take(&mut self, indexes: &[u16]) -> Vec<LiveToken> {
        let mut chosen: Vec<usize> = Vec::new();
        for &index in indexes {
            if let Some(i) = self.pick(index)
                && !chosen.contains(&i)
            {
                chosen.push(i);
            }
        }
        let mut slots: Vec<Option<LiveToken>> = self.live.drain(..).map(Some).collect();
        let taken = chosen
            .iter()
            .map(|&i| slots[i].take())
            .collect::<Option<Vec<_>>>();
        self.live = slots.into_iter().flatten().collect();
        taken.unwrap_or_default()
    }

    fn step(&mut self, instr: &Instr) -> Result<(), String> {
        match instr {
            Instr::Run { device, deps } => {
                let device = DeviceId((*device as usize % self.device_count) as u32);
                let taken = self.take(deps);
                self.schedule(Some(device), taken)
            }
            Instr::Join { deps } => {
                let taken = self.take(deps);
                if taken.is_empty() {
                    return Ok(());
                }
                self.schedule(None, taken)
            }
            Instr::Fork { token, count } | Instr::ForkDetached { token, count } => {
                let Some(index) = self.pick(*token) else {
                    return Ok(());
                };
                let source = self.live.remove(index);
                let count = (*count).max(1) as usize;
                let mut branches = Vec::new();
                let detached = matches!(instr, Instr::ForkDetached { .. });
                if count > 1 || detached {
                    self.consumed.push(source.token.id());
                }
                let fork = if detached {
                    Planner::fork_detached
                } else {
                    Planner::fork
                };
                fork(&mut self.planner, source.token, count, &mut branches)
                    .map_err(|e| format!("{instr:?} failed: {e}"))?;
                if branches.len() != count {
                    return Err(format!("fork into {count} gave {} tokens", branches.len()));
                }
                self.collect_steps();
                for token in branches {
                    self.live.push(LiveToken {
                        token,
                        point: source.point,
                        ops: source.ops.clone(),
                    });
                }
                Ok(())
            }
            Instr::Wait { token } | Instr::Discard { token } => {
                let Some(index) = self.pick(*token) else {
                    return Ok(());
                };
                let live = self.live.remove(index);
                self.consumed.push(live.token.id());
                let result = if matches!(instr, Instr::Wait { .. }) {
                    self.planner.wait(live.token)
                } else {
                    self.discarded_since_end += 1;
                    self.planner.discard(live.token)
                };
                result.map_err(|e| format!("{instr:?} failed: {e}"))?;
                self.collect_steps();
                Ok(())
            }
            Instr::Misuse { kind, token } => self.misuse(*kind, *token),
            Instr::EndProgram => self.end_program(),
        }
    }

    fn schedule(&mut self, device: Option<DeviceId>, taken: Vec<LiveToken>) -> Result<(), String> {
        let start = self.plan.len();
        let points: Vec<usize> = taken.iter().map(|t| t.point).collect();
        let mut ops: Vec<u32> = Vec::new();
        for t in &taken {
            for &op in &t.ops {
                if !ops.contains(&op) {
                    ops.push(op);
                }
            }
        }
        let mut deps: Vec<Token> = Vec::with_capacity(taken.len());
        for t in taken {
            self.consumed.push(t.token.id());
            deps.push(t.token);
        }
        let result = match device {
            Some(device) => {
                let op = OpId(self.op_deps.len() as u32);
                self.planner.run(op, device, &mut deps)
            }
            None => self.planner.join(&mut deps),
        };
        let token = result.map_err(|e| format!("run/join failed: {e}"))?;
        if !deps.is_empty() {
            return Err("a successful call left its dependencies in place".into());
        }
        self.collect_steps();
        let end = self.plan.len();
        let target = self
            .planner
            .stream_of(&token)
            .map_err(|e| format!("stream_of a fresh token failed: {e}"))?;
        let point = (start..end)
            .rev()
            .chain((0..start).rev())
            .find(|&i| node_stream(&self.plan[i]) == Some(target) && is_point(&self.plan[i]));
        let Some(point) = point else {
            return Err(format!("no run or wait on {target} before its token"));
        };
        let token_ops = if let Some(device) = device {
            let op = self.op_deps.len() as u32;
            match self.plan[end - 1] {
                PlanStep::Run {
                    op: OpId(ran),
                    device: on,
                    stream,
                } if ran == op && on == device && stream == target => {}
                ref other => return Err(format!("op {op} ended in {other:?}, not its run")),
            }
            self.op_deps.push(ops);
            self.summary.ops += 1;
            vec![op]
        } else {
            ops
        };
        self.calls.push(Call {
            start,
            end,
            target,
            points,
        });
        self.live.push(LiveToken {
            token,
            point,
            ops: token_ops,
        });
        Ok(())
    }

    /// Notes each live token the planner now calls complete (the first time it does).
    fn note_completed(&mut self) -> Result<(), String> {
        for live in &self.live {
            let id = live.token.id();
            let completed = self
                .planner
                .completed(&live.token)
                .map_err(|e| format!("completed() of a live token failed: {e}"))?;
            if completed && !self.completed.iter().any(|&(seen, ..)| seen == id) {
                self.completed.push((id, live.point, self.plan.len()));
            }
        }
        Ok(())
    }

    fn misuse(&mut self, kind: u8, token: u16) -> Result<(), String> {
        let before = self.planner.clone();
        let valid = self.pick(token).map(|i| self.live.remove(i));
        let valid_id = valid.as_ref().map(|v| v.token.id());
        let mut deps: Vec<Token> = Vec::new();
        let outcome: Result<Error, String> = match kind % 7 {
            0 => {
                let Some(&consumed) = self.consumed.last() else {
                    return self.restore(valid);
                };
                deps.extend(valid_id.map(Token::from_id));
                deps.push(Token::from_id(consumed));
                expect(
                    self.planner.run(OpId(u32::MAX), DeviceId(0), &mut deps),
                    |e| matches!(e, Error::TokenConsumed { token } if *token == consumed),
                )
            }
            1 => {
                let foreign = self.other.run(OpId(0), DeviceId(0), &mut Vec::new());
                let foreign = foreign.map_err(|e| format!("other planner failed: {e}"))?;
                let id = foreign.id();
                deps.extend(valid_id.map(Token::from_id));
                deps.push(foreign);
                expect(
                    self.planner.join(&mut deps),
                    |e| matches!(e, Error::TokenForeign { token, .. } if *token == id),
                )
            }
            2 => {
                let id = TokenId::new(self.planner.id(), u32::MAX, 0);
                deps.push(Token::from_id(id));
                expect(
                    self.planner.join(&mut deps),
                    |e| matches!(e, Error::TokenUnknown { token } if *token == id),
                )
            }
            3 => {
                let Some(id) = valid_id else {
                    return self.restore(valid);
                };
                deps.push(Token::from_id(id));
                deps.push(Token::from_id(id));
                expect(
                    self.planner.join(&mut deps),
                    |e| matches!(e, Error::TokenConsumed { token } if *token == id),
                )
            }
            4 => {
                let Some(id) = valid_id else {
                    return self.restore(valid);
                };
                expect(
                    self.planner.fork(Token::from_id(id), 0, &mut Vec::new()),
                    |e| matches!(e, Error::ZeroSize { .. }),
                )
            }
            5 => expect(self.planner.join(&mut deps), |e| {
                matches!(e, Error::ZeroSize { .. })
            }),
            _ => {
                deps.extend(valid_id.map(Token::from_id));
                let device = DeviceId(self.device_count as u32);
                expect(self.planner.run(OpId(0), device, &mut deps), |e| {
                    matches!(e, Error::UnknownDevice { .. })
                })
            }
        };
        let given = match kind % 7 {
            0 | 1 => 1 + usize::from(valid_id.is_some()),
            2 => 1,
            3 => 2,
            6 => usize::from(valid_id.is_some()),
            _ => 0,
        };
        let error = outcome?;
        if self.planner != before {
            return Err(format!("the planner changed on a failed call ({error})"));
        }
        if !self.planner.steps().is_empty() {
            return Err(format!("a failed call emitted steps ({error})"));
        }
        if deps.len() != given {
            return Err(format!("a failed call took its dependencies ({error})"));
        }
        self.summary.misuses += 1;
        self.restore(valid)
    }

    fn restore(&mut self, valid: Option<LiveToken>) -> Result<(), String> {
        if let Some(valid) = valid {
            self.live.push(valid);
        }
        Ok(())
    }

    fn end_program(&mut self) -> Result<(), String> {
        let report = self.planner.end_program();
        self.collect_steps();
        let outstanding: Vec<TokenId> = report
            .unwaited
            .iter()
            .filter(|u| u.kind == UnwaitedKind::Outstanding)
            .map(|u| u.token)
            .collect();
        let discarded = report.unwaited_count() as usize - outstanding.len();
        if discarded != self.discarded_since_end {
            return Err(format!(
                "report names {discarded} discarded tokens, {} were discarded",
                self.discarded_since_end
            ));
        }
        if outstanding.len() != self.live.len()
            || self
                .live
                .iter()
                .any(|t| !outstanding.contains(&t.token.id()))
        {
            return Err(format!(
                "report names {outstanding:?} outstanding, live were {:?}",
                self.live.iter().map(|t| t.token.id()).collect::<Vec<_>>()
            ));
        }
        self.summary.unwaited += report.unwaited_count() as usize;
        self.discarded_since_end = 0;
        for t in self.live.drain(..) {
            self.consumed.push(t.token.into_id());
        }
        Ok(())
    }

    fn check_plan(&mut self, seed: u64) -> Result<(), String> {
        for view in [TraceView::Logical, TraceView::Driver] {
            let defects = check(&plan_trace(&self.plan, view));
            if let Some(defect) = defects.first() {
                return Err(format!("{view:?} trace of the plan has {defect}"));
            }
        }
        for step in &self.plan {
            match step {
                PlanStep::Wait { .. } => self.summary.waits += 1,
                PlanStep::AcquireStream { fresh: true, .. } => self.summary.fresh_streams += 1,
                PlanStep::AcquireEvent { fresh: true, .. } => self.summary.fresh_events += 1,
                _ => {}
            }
        }
        let order = HappensBefore::new(&self.plan);
        for &(token, point, planned) in &self.completed {
            if !(0..planned).any(|sync| order.synchronised(point, sync, &self.plan)) {
                return Err(format!(
                    "{token:?} (point at step {point}) was called complete after step {planned}, \
                     and no synchronisation before covers it"
                ));
            }
        }
        for call in &self.calls {
            let emitted = self.plan[call.start..call.end]
                .iter()
                .filter(|s| matches!(s, PlanStep::Wait { .. }))
                .count();
            let expected = order.needed_waits(call, &self.plan);
            if emitted != expected {
                return Err(format!(
                    "steps {}..{} wait {emitted} times, {expected} dependencies were not implied",
                    call.start, call.end
                ));
            }
        }
        simulate(&self.plan, &self.op_deps, seed)
    }
}

fn expect<T>(result: crate::Result<T>, right: impl Fn(&Error) -> bool) -> Result<Error, String> {
    match result {
        Ok(_) => Err("a misuse succeeded".into()),
        Err(e) if right(&e) => Ok(e),
        Err(e) => Err(format!("a misuse failed with the wrong error: {e}")),
    }
}

/// The stream a step is ordered on, for runs, waits and records.
fn node_stream(step: &PlanStep) -> Option<StreamId> {
    match *step {
        PlanStep::Run { stream, .. }
        | PlanStep::Wait { stream, .. }
        | PlanStep::Record { stream, .. } => Some(stream),
        _ => None,
    }
}

/// Whether a step moves its stream forward (a token's point is its stream's last such step).
fn is_point(step: &PlanStep) -> bool {
    matches!(step, PlanStep::Run { .. } | PlanStep::Wait { .. })
}

/// Happens-before over plan steps, by brute-force search: each ordered step follows the
/// previous step of its stream, and a wait follows the last record of its event before it.
struct HappensBefore {
    edges: Vec<Vec<usize>>,
}

impl HappensBefore {
    fn new(plan: &[PlanStep]) -> Self {
        let mut edges = vec![Vec::new(); plan.len()];
        let mut last_on_stream: Vec<(StreamId, usize)> = Vec::new();
        let mut last_record: Vec<(EventId, usize)> = Vec::new();
        for (i, step) in plan.iter().enumerate() {
            let Some(stream) = node_stream(step) else {
                continue;
            };
            if let Some(&(_, prev)) = last_on_stream.iter().rev().find(|(s, _)| *s == stream) {
                edges[i].push(prev);
            }
            last_on_stream.push((stream, i));
            match *step {
                PlanStep::Wait { event, .. } => {
                    if let Some(&(_, record)) = last_record.iter().rev().find(|(e, _)| *e == event)
                    {
                        edges[i].push(record);
                    }
                }
                PlanStep::Record { event, .. } => last_record.push((event, i)),
                _ => {}
            }
        }
        HappensBefore { edges }
    }

    /// Whether step `a` happens before (or is) step `b`.
    fn before(&self, a: usize, b: usize) -> bool {
        let mut seen = vec![false; b + 1];
        let mut stack = vec![b];
        while let Some(n) = stack.pop() {
            if n == a {
                return true;
            }
            if n < a || seen[n] {
                continue;
            }
            seen[n] = true;
            stack.extend(self.edges[n].iter().copied());
        }
        false
    }

    /// Whether step `sync` is a host synchronisation that covers step `point`: one of a stream
    /// whose last step before it follows `point`, or of an event whose last record before it
    /// does.
    fn synchronised(&self, point: usize, sync: usize, plan: &[PlanStep]) -> bool {
        let last_before =
            |matches: &dyn Fn(&PlanStep) -> bool| (0..sync).rev().find(|&i| matches(&plan[i]));
        let covered = match plan[sync] {
            PlanStep::SynchronizeStream { stream } => {
                last_before(&|step| node_stream(step) == Some(stream))
            }
            PlanStep::SynchronizeEvent { event } => last_before(
                &|step| matches!(*step, PlanStep::Record { event: e, .. } if e == event),
            ),
            _ => None,
        };
        covered.is_some_and(|last| self.before(point, last))
    }

    /// Dependencies of a call that neither the target stream's tail before the call nor a
    /// later dependency (for equal points: an earlier-listed one) implies.
    fn needed_waits(&self, call: &Call, plan: &[PlanStep]) -> usize {
        let tail = (0..call.start)
            .rev()
            .find(|&i| node_stream(&plan[i]) == Some(call.target) && is_point(&plan[i]));
        call.points
            .iter()
            .enumerate()
            .filter(|&(i, &p)| {
                let by_tail = tail.is_some_and(|t| self.before(p, t));
                let by_other = call
                    .points
                    .iter()
                    .enumerate()
                    .any(|(j, &q)| j != i && if p == q { j < i } else { self.before(p, q) });
                !by_tail && !by_other
            })
            .count()
    }
}

/// A small deterministic generator for the interleaving.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[derive(Clone, Copy)]
enum Queued {
    Run(u32),
    Record(usize),
    /// Waits for a record instance (none: the event was never recorded, nothing to wait for).
    Wait(Option<usize>),
}

/// Executes the plan: the host issues steps in order (blocking on synchronisations), each
/// stream executes its queue in order, a wait completes when the record it captured has
/// executed, and which ready stream (or the host) moves next is picked at random. Fails if an
/// operation runs before one of its dependencies or if nothing can move.
fn simulate(plan: &[PlanStep], op_deps: &[Vec<u32>], seed: u64) -> Result<(), String> {
    let mut rng = XorShift(seed | 1);
    let mut queues: Vec<(StreamId, alloc::collections::VecDeque<Queued>)> = Vec::new();
    let mut latest_record: Vec<(EventId, usize)> = Vec::new();
    let mut records_done: Vec<bool> = Vec::new();
    let mut finished = vec![false; op_deps.len()];
    let mut issued = 0;
    fn queue(
        queues: &mut Vec<(StreamId, alloc::collections::VecDeque<Queued>)>,
        stream: StreamId,
    ) -> usize {
        match queues.iter().position(|(s, _)| *s == stream) {
            Some(i) => i,
            None => {
                queues.push((stream, alloc::collections::VecDeque::new()));
                queues.len() - 1
            }
        }
    }
    loop {
        let host_blocked = match plan.get(issued) {
            None => true,
            Some(PlanStep::SynchronizeStream { stream }) => {
                queues.iter().any(|(s, q)| s == stream && !q.is_empty())
            }
            Some(PlanStep::SynchronizeEvent { event }) => latest_record
                .iter()
                .rev()
                .find(|(e, _)| e == event)
                .is_some_and(|&(_, r)| !records_done[r]),
            Some(_) => false,
        };
        let ready: Vec<usize> = queues
            .iter()
            .enumerate()
            .filter(|(_, (_, q))| match q.front() {
                None => false,
                Some(Queued::Wait(Some(r))) => records_done[*r],
                Some(_) => true,
            })
            .map(|(i, _)| i)
            .collect();
        let choices = ready.len() + usize::from(!host_blocked);
        if choices == 0 {
            if issued == plan.len() && queues.iter().all(|(_, q)| q.is_empty()) {
                return Ok(());
            }
            return Err(format!("the simulation is stuck at step {issued}"));
        }
        let choice = rng.below(choices);
        if choice == ready.len() {
            let step = plan[issued];
            issued += 1;
            match step {
                PlanStep::Run { op, stream, .. } => {
                    let q = queue(&mut queues, stream);
                    queues[q].1.push_back(Queued::Run(op.0));
                }
                PlanStep::Record { event, stream } => {
                    records_done.push(false);
                    let instance = records_done.len() - 1;
                    latest_record.push((event, instance));
                    let q = queue(&mut queues, stream);
                    queues[q].1.push_back(Queued::Record(instance));
                }
                PlanStep::Wait { stream, event } => {
                    let captured = latest_record
                        .iter()
                        .rev()
                        .find(|(e, _)| *e == event)
                        .map(|&(_, r)| r);
                    let q = queue(&mut queues, stream);
                    queues[q].1.push_back(Queued::Wait(captured));
                }
                _ => {}
            }
            continue;
        }
        let Some(item) = queues[ready[choice]].1.pop_front() else {
            continue;
        };
        match item {
            Queued::Run(op) => {
                let deps = op_deps.get(op as usize).map_or(&[][..], |d| &d[..]);
                if let Some(&dep) = deps.iter().find(|&&d| !finished[d as usize]) {
                    return Err(format!(
                        "op {op} started before its dependency op {dep} finished"
                    ));
                }
                finished[op as usize] = true;
            }
            Queued::Record(instance) => records_done[instance] = true,
            Queued::Wait(_) => {}
        }
    }
}
