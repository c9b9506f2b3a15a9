//! Tokens across the boundary: `gpurt_token_t`, the `after` lists and `done` tokens every
//! enqueued call takes, and forking, joining and waiting for tokens.

use gpu_runtime::error::Error;
use gpu_runtime::token::{Token, TokenId, check_fork_count};

use crate::shared::{CapiError, GpurtStatus, dispatch, status_of, with_session};

use super::args::{c_slice, check_array, out_param, write_out};

/// "The work that produced me has completed": what every enqueued operation returns, and what
/// later operations list to run after it. Linear: each token is consumed by exactly one call
/// (an operation's `after` list, `gpurt_join`, `gpurt_fork` or `gpurt_wait`); use
/// `gpurt_fork` to depend on it twice. `{0}` is the null token.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpurtToken {
    /// The token's value (opaque).
    pub id: u64,
}

/// The tokens of an `after` list, to be consumed by the call.
///
/// # Safety
/// `after` is NULL (with `count` 0) or points to `count` tokens.
pub(super) unsafe fn tokens_in(
    after: *const GpurtToken,
    count: usize,
) -> Result<Vec<Token>, CapiError> {
    // SAFETY: this function's contract: `after` is NULL with `count` 0 or points to `count`
    // tokens.
    let tokens = unsafe { c_slice(after, count, "token list") }?;
    tokens.iter().map(|token| token_in(*token)).collect()
}

fn token_in(token: GpurtToken) -> Result<Token, CapiError> {
    match token.id {
        0 => Err(Error::NullPointer { what: "token" }.into()),
        id => Ok(Token::from_id(TokenId::from_raw(id))),
    }
}

pub(super) fn token_out(token: Token) -> GpurtToken {
    GpurtToken {
        id: token.into_id().raw(),
    }
}

/// Runs an operation that consumes the tokens of `after` and yields one, written to `*done`.
///
/// # Safety
/// `after` points to `after_count` tokens (or is NULL with 0); `done` is NULL (refused) or
/// points to writable memory for a token.
pub(super) unsafe fn enqueue(
    after: *const GpurtToken,
    after_count: usize,
    done: *mut GpurtToken,
    operation: impl FnOnce(&mut Vec<Token>) -> Result<GpurtToken, CapiError>,
) -> GpurtStatus {
    status_of(|| {
        let done = out_param(done, "done token out-parameter")?;
        // SAFETY: this function's contract: `after` points to `after_count` tokens (or is NULL
        // with 0).
        let mut after = unsafe { tokens_in(after, after_count) }?;
        write_out(done, operation(&mut after)?);
        Ok(())
    })
}

/// Forks `token` into `count` tokens written to `branches[0..count]`, each usable once (each
/// branch waits lazily, at its first use). Consumes `token` on success. A count of zero is
/// `GPURT_STATUS_ZERO_SIZE` and one above 65,536 (the branches one fork may make)
/// `GPURT_STATUS_LIMIT_EXCEEDED`, both before anything is allocated and leaving `token` usable.
///
/// Thread safety: any thread.
///
/// # Safety
/// `branches` points to writable memory for `count` tokens.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_fork(
    token: GpurtToken,
    count: usize,
    branches: *mut GpurtToken,
) -> GpurtStatus {
    status_of(|| {
        check_fork_count(count)?;
        let out = out_param(branches, "fork branches out-parameter")?;
        check_array(out, count, "fork branches out-parameter")?;
        let token = token_in(token)?;
        let forked = with_session(|s| dispatch!(s, s => Ok(s.runtime().fork(token, count)?)))?;
        for (index, branch) in forked.into_iter().enumerate() {
            // SAFETY: the caller's promise: room for `count` tokens; the runtime made `count`.
            write_out(unsafe { out.add(index) }, token_out(branch));
        }
        Ok(())
    })
}

/// Joins `count` tokens into one written to `*joined` (work after it runs after all of them).
/// Consumes the tokens on success.
///
/// Thread safety: any thread.
///
/// # Safety
/// `tokens` points to `count` tokens; `joined` to writable memory for a token.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpurt_join(
    tokens: *const GpurtToken,
    count: usize,
    joined: *mut GpurtToken,
) -> GpurtStatus {
    let operation = |tokens: &mut Vec<Token>| {
        with_session(|s| dispatch!(s, s => Ok(token_out(s.runtime().join(tokens)?))))
    };
    // SAFETY: `gpurt_join`'s contract: `tokens` points to `count` tokens and `joined` to
    // writable memory for a token, as `enqueue` needs.
    unsafe { enqueue(tokens, count, joined, operation) }
}

/// Blocks until the work behind `token` has completed and reports its failure, if any.
/// Consumes the token.
///
/// Thread safety: any thread; blocks only the caller (other threads go on submitting work).
#[unsafe(no_mangle)]
pub extern "C" fn gpurt_wait(token: GpurtToken) -> GpurtStatus {
    status_of(|| {
        let token = token_in(token)?;
        with_session(|s| dispatch!(s, s => Ok(s.runtime().wait(token)?)))
    })
}
