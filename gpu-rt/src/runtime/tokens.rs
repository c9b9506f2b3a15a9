//! Tokens: joining, forking, releasing and waiting for the work they stand for; the
//! planner decides, the state carries the plan out.

use super::*;

impl<B: Backend> Runtime<B> {
    /// Joins `after` into one token. On success `after` is emptied; on a planning error it is
    /// left untouched.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(2)))?;
    /// let a = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let b = rt.alloc(DeviceId(1), MemoryKind::Device, 64)?;
    /// let mut both = vec![
    ///     rt.fill(DeviceId(0), a.all(), 1, &mut vec![])?,
    ///     rt.fill(DeviceId(1), b.all(), 2, &mut vec![])?,
    /// ];
    /// let joined = rt.join(&mut both)?;
    /// assert!(both.is_empty()); // the tokens were consumed
    /// rt.wait(joined)?; // both fills have run
    /// # Ok::<(), Error>(())
    /// ```
    pub fn join(&self, after: &mut Vec<Token>) -> Result<Token> {
        let mut state = self.state()?;
        let token = state.planner.join(after)?;
        state.finish(&self.backend, token)
    }

    /// Forks `token` into `count` tokens, each usable once (branches wait lazily, at first use).
    /// The first keeps the token's stream; the others share one event, recorded only when
    /// needed (a wait on a branch, or the stream moving on or going back to the pool first): a
    /// fork whose branches all come back to its stream before then records nothing.
    /// A fork into no branch, or into more than [`token::MAX_FORK_BRANCHES`], is refused
    /// ([`Error::ZeroSize`], [`Error::LimitExceeded`]) before anything is allocated, and its
    /// token discarded: it cannot be handed back, and what it holds goes back to the pools
    /// (shutdown reports it as discarded). Check the count first with
    /// [`token::check_fork_count`] to keep the token on refusal.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let d0 = DeviceId(0);
    /// let [x, y, z] = [0; 3].map(|_| rt.alloc(d0, MemoryKind::Device, 64));
    /// let (x, y, z) = (x?, y?, z?);
    /// let filled = rt.fill(d0, x.all(), 9, &mut vec![])?;
    /// // Two copies read what the fill wrote: each needs a token of its own.
    /// let mut branches = rt.fork(filled, 2)?.into_iter();
    /// let to_y = rt.copy(d0, y.all(), x.all(), &mut branches.next().into_iter().collect())?;
    /// let to_z = rt.copy(d0, z.all(), x.all(), &mut branches.next().into_iter().collect())?;
    /// rt.wait(rt.join(&mut vec![to_y, to_z])?)?;
    /// // No branch at all is refused (check first with `token::check_fork_count`).
    /// assert!(gpu_core::token::check_fork_count(0).is_err());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn fork(&self, token: Token, count: usize) -> Result<Vec<Token>> {
        let mut branches = Vec::new();
        self.fork_into(token, count, &mut branches)?;
        Ok(branches)
    }

    /// [`Runtime::fork`], its branches appended to `branches` (nothing appended on failure):
    /// a caller that forks on every call keeps one `Vec` and, once it has room, allocates
    /// nothing per fork.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let mut branches = Vec::with_capacity(2);
    /// for value in 0..3 {
    ///     let filled = rt.fill(DeviceId(0), buffer.all(), value, &mut branches)?;
    ///     rt.fork_into(filled, 2, &mut branches)?;
    ///     assert_eq!(branches.len(), 2);
    ///     rt.release(branches.pop().unwrap())?; // the next fill runs after the other one
    /// }
    /// rt.wait(branches.pop().unwrap())?;
    /// // A refused count appends nothing.
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 0, &mut vec![])?;
    /// assert!(rt.fork_into(filled, 0, &mut branches).is_err());
    /// assert!(branches.is_empty());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn fork_into(&self, token: Token, count: usize, branches: &mut Vec<Token>) -> Result<()> {
        self.fork_with(token, count, token::Planner::fork, branches)
    }

    /// Forks `token` into `count` branches that share one event and gives its stream back to
    /// the pool at once (no branch keeps it, so the event is recorded now), for layers whose handles may be
    /// abandoned without a word: such a handle then holds an event, never a stream. Counts are
    /// refused as by [`Runtime::fork`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 3, &mut vec![])?;
    /// let branches = rt.fork_detached(filled, 3)?;
    /// assert_eq!(branches.len(), 3);
    /// for branch in branches {
    ///     rt.wait(branch)?; // each waits on the one shared event
    /// }
    /// # Ok::<(), Error>(())
    /// ```
    pub fn fork_detached(&self, token: Token, count: usize) -> Result<Vec<Token>> {
        let mut branches = Vec::new();
        self.fork_detached_into(token, count, &mut branches)?;
        Ok(branches)
    }

    /// [`Runtime::fork_detached`], its branches appended to `branches` (nothing appended on
    /// failure), as [`Runtime::fork_into`] is to [`Runtime::fork`].
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 3, &mut vec![])?;
    /// let mut branches = Vec::with_capacity(3);
    /// rt.fork_detached_into(filled, 3, &mut branches)?;
    /// for branch in branches.drain(..) {
    ///     rt.wait(branch)?; // each waits on the one shared event
    /// }
    /// # Ok::<(), Error>(())
    /// ```
    pub fn fork_detached_into(
        &self,
        token: Token,
        count: usize,
        branches: &mut Vec<Token>,
    ) -> Result<()> {
        self.fork_with(token, count, token::Planner::fork_detached, branches)
    }

    /// A fork planned by `plan` (the planner's `fork` or `fork_detached`) and carried out, its
    /// branches appended to `branches`; on failure they are taken off again.
    fn fork_with(
        &self,
        token: Token,
        count: usize,
        plan: fn(&mut token::Planner, Token, usize, &mut Vec<Token>) -> Result<()>,
        branches: &mut Vec<Token>,
    ) -> Result<()> {
        let mut state = self.state()?;
        if let Err(refused) = token::check_fork_count(count) {
            state.abandon(&self.backend, token);
            return Err(refused);
        }
        // The planner reserves room for the branches fallibly.
        let first = branches.len();
        if let Err(refused) = plan(&mut state.planner, token, count, branches) {
            branches.truncate(first);
            return Err(refused);
        }
        let executed = state.execute(&self.backend, &mut state::no_work);
        if executed.is_err() {
            for branch in branches.drain(first..) {
                state.abandon(&self.backend, branch);
            }
        }
        executed
    }

    /// Ends `token` without waiting and without reporting it at shutdown: for a token whose
    /// work is observed through another one, or that its holder gave up on purpose (an MLIR
    /// event destroyed). What it held goes back to the pools.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 3, &mut vec![])?;
    /// let mut branches = rt.fork(filled, 2)?;
    /// rt.wait(branches.pop().unwrap())?;
    /// rt.release(branches.pop().unwrap())?; // its work was seen through the other branch
    /// drop(buffer);
    /// assert!(rt.shutdown()?.program.unwaited.is_empty()); // nothing reported as unwaited
    /// # Ok::<(), Error>(())
    /// ```
    pub fn release(&self, token: Token) -> Result<()> {
        let mut state = self.state.lock();
        state.planner.release(token)?;
        state.execute(&self.backend, &mut state::no_work)
    }

    /// Ends `token` if its work has completed already, without blocking: `Ok(None)` then;
    /// otherwise the token comes back, unchanged. A token that a synchronisation which
    /// succeeded has already covered (a [`Runtime::wait`] on it or on a later point of the same
    /// work) is done without asking the driver anything: that synchronisation would have
    /// reported a failure. Otherwise only a fork branch whose event has been recorded can be
    /// found done, by one event query (and no synchronisation: the query reported success, so
    /// there is no error left to observe); a token that owns its stream is handed back unasked
    /// (the backend has no stream query), and so is a branch whose fork's event nothing has
    /// needed yet (it is recorded only when needed, see [`Runtime::fork`]). The first branch
    /// of a [`Runtime::fork`] takes over its token's stream, so it is found done only through a
    /// synchronisation; the other branches, and every branch of [`Runtime::fork_detached`],
    /// can be asked about.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 3, &mut vec![])?;
    /// // A token that owns its stream comes back unasked.
    /// let filled = rt.wait_if_done(filled)?.expect("handed back");
    /// let mut branches = rt.fork(filled, 2)?;
    /// rt.wait(branches.remove(0))?; // the first branch, which holds the fill's stream
    /// // That wait covered the fill: the other branch ends without asking the driver.
    /// let before = rt.backend().calls();
    /// assert!(rt.wait_if_done(branches.remove(0))?.is_none());
    /// assert_eq!(rt.backend().calls().since(&before).total, 0);
    /// # Ok::<(), Error>(())
    /// ```
    pub fn wait_if_done(&self, token: Token) -> Result<Option<Token>> {
        let mut state = self.state()?;
        if state.planner.completed(&token)? {
            state.planner.release(token)?;
            state.execute(&self.backend, &mut state::no_work)?;
            return Ok(None);
        }
        let event = match state.planner.pending_of(&token)? {
            token::PendingWait::Event(event) => state.event_handle(event)?,
            token::PendingWait::Stream(_) => return Ok(Some(token)),
        };
        drop(state);
        if self.backend.event_query(event)? {
            self.release(token).map(|()| None)
        } else {
            Ok(Some(token))
        }
    }

    /// Whether a synchronisation that succeeded has already covered `token` (a
    /// [`Runtime::wait`] on it, or on a later point of the same work): its work has completed,
    /// and ending it ([`Runtime::wait_if_done`], [`Runtime::release`]) asks the driver nothing.
    /// Makes no driver call.
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let rt = Runtime::new(HostBackend::new(HostConfig::with_devices(1)))?;
    /// let buffer = rt.alloc(DeviceId(0), MemoryKind::Device, 64)?;
    /// let filled = rt.fill(DeviceId(0), buffer.all(), 3, &mut vec![])?;
    /// let [first, second] = <[Token; 2]>::try_from(rt.fork(filled, 2)?).unwrap();
    /// let after = rt.fill(DeviceId(0), buffer.all(), 4, &mut vec![first])?;
    /// assert!(!rt.completed(&second)?);
    /// rt.wait(after)?; // a later point of the same stream
    /// assert!(rt.completed(&second)?);
    /// # rt.release(second)?;
    /// # Ok::<(), Error>(())
    /// ```
    pub fn completed(&self, token: &Token) -> Result<bool> {
        self.state()?.planner.completed(token)
    }

    /// Blocks until the work behind `token` has completed, and reports its failure if any.
    /// The runtime's state is not locked while blocking: other threads go on submitting (the
    /// stream or event waited on stays out of the pools until the wait ends).
    ///
    /// # Examples
    ///
    /// ```
    /// use gpu_rt::prelude::*;
    ///
    /// let backend = HostBackend::new(HostConfig::with_devices(1));
    /// // A kernel that fails when it runs: its first argument is not a `u32`.
    /// backend.register_kernel("needs_u32", |ctx, _| ctx.arg_u32(0).map(drop));
    /// let rt = Runtime::new(backend)?;
    /// let dims = LaunchDims::linear(1, 1);
    /// let launch = |args: &[Arg<'_>]| {
    ///     // SAFETY: the kernel touches no memory.
    ///     unsafe { rt.launch(DeviceId(0), "needs_u32", dims, args, &mut vec![]) }
    /// };
    /// rt.wait(launch(&[Arg::U32(1)])?)?;
    /// let failing = launch(&[Arg::F32(1.0)])?; // accepted: the kernel fails when it runs
    /// assert!(rt.wait(failing).is_err()); // and the wait reports it
    /// # Ok::<(), Error>(())
    /// ```
    pub fn wait(&self, token: Token) -> Result<()> {
        let (pending, host_wait, hold) = {
            let mut state = self.state()?;
            let pending = state.planner.begin_wait(token)?;
            // A fork branch's event that nothing needed before is recorded now.
            let host_wait = state
                .execute(&self.backend, &mut state::no_work)
                .and_then(|()| state.host_wait(&pending));
            let hold = host_wait
                .as_ref()
                .ok()
                .and_then(HostWait::device)
                .and_then(|device| self.health.hold_host_wait(device));
            (pending, host_wait, hold)
        };
        let waited = host_wait.and_then(|host_wait| host_wait.block(&self.backend, &self.health));
        drop(hold);
        let mut state = self.state.lock();
        state.planner.end_wait(pending, waited.is_ok());
        let released = state.execute(&self.backend, &mut state::no_work);
        waited.and(released)
    }
}
