//! Memory pools: which pool serves what, which agents may reach a pool, what an address's
//! `hsa_amd_pointer_info` means for pinning and copies, and giving pool memory back.
//!
//! Each agent's pools are read once at open (segment, flags, size); the choice among them is
//! pure, from those facts, and so are the readings of `hsa_amd_pointer_info`: host memory
//! pinned by anyone, and the agents a copy names.

use core::ffi::c_void;

use gpu_core::{ByteRange, DriverError, Error, Result};

use crate::library::Hsa;
use crate::result::{check, driver_error};
use crate::sys;

/// What the backend reads of one memory pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PoolFacts {
    /// `HSA_AMD_MEMORY_POOL_INFO_SEGMENT`.
    pub(crate) segment: sys::hsa_amd_segment_t,
    /// `HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS` (global segment only).
    pub(crate) global_flags: u32,
    /// `HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED`.
    pub(crate) alloc_allowed: bool,
    /// `HSA_AMD_MEMORY_POOL_INFO_SIZE`, in bytes.
    pub(crate) size: usize,
}

/// The pools the backend uses, chosen among one agent's pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChosenPools<P> {
    /// A GPU's device memory: its global, coarse-grained, allocatable pool.
    pub(crate) device: Option<(P, usize)>,
    /// A GPU's workgroup memory (LDS): the size of its group-segment pool.
    pub(crate) group_bytes: Option<usize>,
    /// Host memory every agent can be allowed to reach: the CPU's global, fine-grained,
    /// allocatable pool, preferring one without the kernarg flag.
    pub(crate) host: Option<P>,
    /// Kernel arguments: the CPU's global pool flagged `KERNARG_INIT`.
    pub(crate) kernarg: Option<P>,
}

/// Chooses among one agent's pools (in the order HSA listed them; the first fit wins).
pub(crate) fn choose_pools<P: Copy>(pools: &[(P, PoolFacts)]) -> ChosenPools<P> {
    let has = |facts: &PoolFacts, flag| facts.global_flags & flag != 0;
    let global =
        |facts: &PoolFacts| facts.segment == sys::HSA_AMD_SEGMENT_GLOBAL && facts.alloc_allowed;
    let first =
        |fits: &dyn Fn(&PoolFacts) -> bool| pools.iter().find(|(_, facts)| fits(facts)).copied();
    let fine = sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
    let kernarg = sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT;
    ChosenPools {
        device: first(&|f| {
            global(f) && has(f, sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED)
        })
        .map(|(pool, facts)| (pool, facts.size)),
        group_bytes: first(&|f| f.segment == sys::HSA_AMD_SEGMENT_GROUP)
            .map(|(_, facts)| facts.size),
        host: first(&|f| global(f) && has(f, fine) && !has(f, kernarg))
            .or_else(|| first(&|f| global(f) && has(f, fine)))
            .map(|(pool, _)| pool),
        kernarg: first(&|f| global(f) && has(f, kernarg)).map(|(pool, _)| pool),
    }
}

/// What the pool callback collects: each pool with its facts, or the first failure.
struct PoolScan<'a> {
    hsa: &'a Hsa,
    pools: Vec<(sys::hsa_amd_memory_pool_t, PoolFacts)>,
    failure: Option<DriverError>,
}

impl PoolScan<'_> {
    /// One `hsa_amd_memory_pool_get_info` into `value`.
    fn info<T>(
        &self,
        pool: sys::hsa_amd_memory_pool_t,
        attribute: sys::hsa_amd_memory_pool_info_t,
        value: &mut T,
    ) -> Result<()> {
        let get = self.hsa.hsa_amd_memory_pool_get_info()?;
        // SAFETY: `value` has the attribute's type (the callers pair them as hsa_ext_amd.h
        // documents) and is valid for writes.
        check("hsa_amd_memory_pool_get_info", unsafe {
            get(pool, attribute, (value as *mut T).cast())
        })
    }

    /// The facts of `pool` (the global flags only for the global segment).
    fn facts(&self, pool: sys::hsa_amd_memory_pool_t) -> Result<PoolFacts> {
        let mut facts = PoolFacts {
            segment: 0,
            global_flags: 0,
            alloc_allowed: false,
            size: 0,
        };
        self.info(
            pool,
            sys::HSA_AMD_MEMORY_POOL_INFO_SEGMENT,
            &mut facts.segment,
        )?;
        if facts.segment == sys::HSA_AMD_SEGMENT_GLOBAL {
            self.info(
                pool,
                sys::HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                &mut facts.global_flags,
            )?;
        }
        self.info(
            pool,
            sys::HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
            &mut facts.alloc_allowed,
        )?;
        self.info(pool, sys::HSA_AMD_MEMORY_POOL_INFO_SIZE, &mut facts.size)?;
        Ok(facts)
    }
}

/// hsa_amd_agent_iterate_memory_pools' callback: records each pool's facts.
unsafe extern "C" fn collect_pool(
    pool: sys::hsa_amd_memory_pool_t,
    data: *mut c_void,
) -> sys::hsa_status_t {
    // SAFETY: `data` is the `PoolScan` that `agent_pools` passed, alive for the iteration.
    let scan = unsafe { &mut *data.cast::<PoolScan<'_>>() };
    match scan.facts(pool) {
        Ok(facts) => {
            scan.pools.push((pool, facts));
            sys::HSA_STATUS_SUCCESS
        }
        Err(Error::Driver(failure)) => {
            let code = failure.code as sys::hsa_status_t;
            scan.failure = Some(failure);
            code
        }
        Err(_) => {
            scan.failure = Some(driver_error(
                "hsa_amd_memory_pool_get_info",
                sys::HSA_STATUS_ERROR,
            ));
            sys::HSA_STATUS_ERROR
        }
    }
}

/// Every memory pool of `agent`, with its facts.
pub(crate) fn agent_pools(
    hsa: &Hsa,
    agent: sys::hsa_agent_t,
) -> Result<Vec<(sys::hsa_amd_memory_pool_t, PoolFacts)>> {
    let iterate = hsa.hsa_amd_agent_iterate_memory_pools()?;
    hsa.hsa_amd_memory_pool_get_info()?;
    let mut scan = PoolScan {
        hsa,
        pools: Vec::new(),
        failure: None,
    };
    // SAFETY: the callback only uses `scan` through the pointer while the iteration runs.
    let code = unsafe {
        iterate(
            agent,
            Some(collect_pool),
            (&mut scan as *mut PoolScan<'_>).cast(),
        )
    };
    if let Some(failure) = scan.failure {
        return Err(Error::Driver(failure));
    }
    check("hsa_amd_agent_iterate_memory_pools", code)?;
    Ok(scan.pools)
}

/// Gives pool memory back, if any, on paths that report something else (nothing to report: a
/// buffer nothing reads is freed, or left to the process if even the lookup fails).
pub(crate) fn free_pool_memory(hsa: &Hsa, address: Option<usize>) {
    if let (Some(address), Ok(free)) = (address, hsa.hsa_amd_memory_pool_free()) {
        // SAFETY: pool memory of the backend that nothing reads any more.
        let _ = unsafe { free(address as *mut c_void) };
    }
}

/// Whether an agent may be given direct access to a pool's memory, by what
/// `HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS` says: anything but `NEVER_ALLOWED` (allowed by
/// default, or for each buffer hsa_amd_agents_allow_access opens to the agent).
pub(crate) fn accessible(access: sys::hsa_amd_memory_pool_access_t) -> bool {
    access != sys::HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED
}

/// The agents of `agents` other than `owner` that may reach `owner`'s pool `pool`
/// ([`accessible`], one hsa_amd_agent_memory_pool_get_info each), in the order given.
pub(crate) fn reaching_agents(
    hsa: &Hsa,
    owner: sys::hsa_agent_t,
    pool: sys::hsa_amd_memory_pool_t,
    agents: &[sys::hsa_agent_t],
) -> Result<Vec<sys::hsa_agent_t>> {
    let get = hsa.hsa_amd_agent_memory_pool_get_info()?;
    let mut reaching = Vec::new();
    for &agent in agents.iter().filter(|agent| agent.handle != owner.handle) {
        let mut access = sys::HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED;
        // SAFETY: the ACCESS attribute's value is an `hsa_amd_memory_pool_access_t`, and
        // `access` is one, valid for writes.
        check("hsa_amd_agent_memory_pool_get_info", unsafe {
            get(
                agent,
                pool,
                sys::HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS,
                (&mut access as *mut sys::hsa_amd_memory_pool_access_t).cast(),
            )
        })?;
        if accessible(access) {
            reaching.push(agent);
        }
    }
    Ok(reaching)
}

/// Host memory pinned by anyone, as `hsa_amd_pointer_info` describes it: the allocation's host
/// extent and the address agents use for its start. Locked memory (`hsa_amd_memory_lock`) and
/// memory of a pool of the CPU agent `cpu` count; device memory, unknown (pageable) memory and
/// empty extents do not.
pub(crate) fn pinned_extent(
    info: &sys::hsa_amd_pointer_info_t,
    cpu: sys::hsa_agent_t,
) -> Option<(ByteRange, usize)> {
    let agent_base = info.agentBaseAddress as usize;
    let host_base = match info.type_ {
        sys::HSA_EXT_POINTER_TYPE_LOCKED => info.hostBaseAddress as usize,
        sys::HSA_EXT_POINTER_TYPE_HSA if info.agentOwner.handle == cpu.handle => {
            // System memory from a CPU pool: one address for host and agents.
            if info.hostBaseAddress.is_null() {
                agent_base
            } else {
                info.hostBaseAddress as usize
            }
        }
        _ => return None,
    };
    Some((ByteRange::new(host_base, info.sizeInBytes)?, agent_base))
}

/// The agent and address one side of `hsa_amd_memory_async_copy` names for `address`, from
/// what `hsa_amd_pointer_info` said of it: memory of a GPU's pool (`is_gpu` of its owner) is
/// that GPU's; locked host memory is the CPU's, at the agent address HSA mapped it to (the same
/// offset from the agent base as from the host base; an address already in the agent range
/// stays); anything else is the CPU's, as given.
pub(crate) fn copy_side(
    info: &sys::hsa_amd_pointer_info_t,
    address: usize,
    cpu: sys::hsa_agent_t,
    is_gpu: impl Fn(sys::hsa_agent_t) -> bool,
) -> (sys::hsa_agent_t, usize) {
    let agent_base = info.agentBaseAddress as usize;
    let host_base = info.hostBaseAddress as usize;
    let within = |base: usize| address >= base && address - base < info.sizeInBytes;
    match info.type_ {
        sys::HSA_EXT_POINTER_TYPE_HSA if is_gpu(info.agentOwner) => (info.agentOwner, address),
        sys::HSA_EXT_POINTER_TYPE_LOCKED if !within(agent_base) && within(host_base) => {
            (cpu, agent_base + (address - host_base))
        }
        _ => (cpu, address),
    }
}

/// How a copy names the agent of each side for `hsa_amd_memory_async_copy`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CopyAgents {
    /// Found from each address ([`copy_side`] of its `hsa_amd_pointer_info`): the plain copy.
    FromAddresses,
    /// Named by the caller, each address used as given: the peer copy's two GPUs.
    Named {
        /// The destination's agent.
        dst: sys::hsa_agent_t,
        /// The source's agent.
        src: sys::hsa_agent_t,
    },
}

impl CopyAgents {
    /// The agent and address of the destination, then of the source; `find` looks an address
    /// up (called only for [`CopyAgents::FromAddresses`], destination first).
    pub(crate) fn sides(
        self,
        dst: usize,
        src: usize,
        mut find: impl FnMut(usize) -> Result<(sys::hsa_agent_t, usize)>,
    ) -> Result<[(sys::hsa_agent_t, usize); 2]> {
        match self {
            CopyAgents::FromAddresses => Ok([find(dst)?, find(src)?]),
            CopyAgents::Named {
                dst: dst_agent,
                src: src_agent,
            } => Ok([(dst_agent, dst), (src_agent, src)]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GLOBAL: sys::hsa_amd_segment_t = sys::HSA_AMD_SEGMENT_GLOBAL;
    const FINE: u32 = sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
    const COARSE: u32 = sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED;
    const KERNARG: u32 = sys::HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT;

    fn pool(segment: sys::hsa_amd_segment_t, flags: u32, alloc: bool, size: usize) -> PoolFacts {
        PoolFacts {
            segment,
            global_flags: flags,
            alloc_allowed: alloc,
            size,
        }
    }

    #[test]
    fn a_gpu_gets_its_coarse_pool_and_lds_size() {
        // What an MI250's GCD lists: coarse VRAM, fine VRAM, group (LDS).
        let pools = [
            ("fine vram", pool(GLOBAL, FINE, true, 64 << 30)),
            ("coarse vram", pool(GLOBAL, COARSE, true, 64 << 30)),
            ("lds", pool(sys::HSA_AMD_SEGMENT_GROUP, 0, false, 65536)),
        ];
        let chosen = choose_pools(&pools);
        assert_eq!(chosen.device, Some(("coarse vram", 64 << 30)));
        assert_eq!(chosen.group_bytes, Some(65536));
        assert_eq!(chosen.kernarg, None);
        // The fine-grained VRAM pool is not host memory: it is the first fine one here, but a
        // GPU's choice of `host` is never used (the backend reads host pools of the CPU).
        assert_eq!(chosen.host, Some("fine vram"));
    }

    #[test]
    fn the_cpu_gets_fine_host_memory_and_the_kernarg_pool() {
        let pools = [
            ("kernarg", pool(GLOBAL, FINE | KERNARG, true, 1 << 30)),
            ("coarse", pool(GLOBAL, COARSE, true, 1 << 30)),
            ("fine", pool(GLOBAL, FINE, true, 1 << 30)),
        ];
        let chosen = choose_pools(&pools);
        assert_eq!(
            chosen.host,
            Some("fine"),
            "the pool without the kernarg flag first"
        );
        assert_eq!(chosen.kernarg, Some("kernarg"));
        assert_eq!(chosen.device, Some(("coarse", 1 << 30)));
        // With only the kernarg pool, host memory comes from it too.
        let only_kernarg = [("kernarg", pool(GLOBAL, FINE | KERNARG, true, 1 << 30))];
        assert_eq!(choose_pools(&only_kernarg).host, Some("kernarg"));
    }

    #[test]
    fn pools_the_runtime_cannot_allocate_from_are_never_chosen() {
        let pools = [
            (1, pool(GLOBAL, COARSE, false, 1 << 30)),
            (2, pool(GLOBAL, FINE | KERNARG, false, 1 << 30)),
            (3, pool(sys::HSA_AMD_SEGMENT_READONLY, FINE, true, 1 << 30)),
        ];
        assert_eq!(
            choose_pools(&pools),
            ChosenPools {
                device: None,
                group_bytes: None,
                host: None,
                kernarg: None
            }
        );
    }

    fn info(
        kind: sys::hsa_amd_pointer_type_t,
        host: usize,
        agent: usize,
        size: usize,
        owner: u64,
    ) -> sys::hsa_amd_pointer_info_t {
        sys::hsa_amd_pointer_info_t {
            size: size_of::<sys::hsa_amd_pointer_info_t>() as u32,
            type_: kind,
            agentBaseAddress: agent as *mut c_void,
            hostBaseAddress: host as *mut c_void,
            sizeInBytes: size,
            agentOwner: sys::hsa_agent_t { handle: owner },
            ..Default::default()
        }
    }

    #[test]
    fn copies_name_the_owning_gpu_or_the_cpu_at_the_agent_address() {
        let cpu = sys::hsa_agent_t { handle: 7 };
        let side = |info: &sys::hsa_amd_pointer_info_t, address| {
            let (agent, address) = copy_side(info, address, cpu, |a| a.handle == 3);
            (agent.handle, address)
        };
        let device = info(sys::HSA_EXT_POINTER_TYPE_HSA, 0, 0x5000, 8192, 3);
        assert_eq!(side(&device, 0x5010), (3, 0x5010));
        let host_pool = info(sys::HSA_EXT_POINTER_TYPE_HSA, 0, 0x5000, 8192, 7);
        assert_eq!(side(&host_pool, 0x5010), (7, 0x5010));
        let locked = info(sys::HSA_EXT_POINTER_TYPE_LOCKED, 0x1000, 0x9000, 4096, 3);
        assert_eq!(side(&locked, 0x1000), (7, 0x9000));
        assert_eq!(side(&locked, 0x1ff8), (7, 0x9ff8));
        assert_eq!(
            side(&locked, 0x9010),
            (7, 0x9010),
            "already an agent address"
        );
        // HSA locking in place (agent address = host address) changes nothing.
        let in_place = info(sys::HSA_EXT_POINTER_TYPE_LOCKED, 0x1000, 0x1000, 4096, 3);
        assert_eq!(side(&in_place, 0x1800), (7, 0x1800));
        let unknown = info(sys::HSA_EXT_POINTER_TYPE_UNKNOWN, 0, 0, 0, 0);
        assert_eq!(side(&unknown, 0x4242), (7, 0x4242));
    }

    #[test]
    fn only_never_allowed_keeps_an_agent_from_a_pool() {
        assert!(!accessible(sys::HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED));
        assert!(accessible(
            sys::HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT
        ));
        assert!(accessible(
            sys::HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT
        ));
    }

    #[test]
    fn a_peer_copy_names_its_agents_and_a_plain_copy_looks_each_address_up() {
        let agent = |handle| sys::hsa_agent_t { handle };
        let handles = |sides: [(sys::hsa_agent_t, usize); 2]| {
            sides.map(|(agent, address)| (agent.handle, address))
        };
        let named = CopyAgents::Named {
            dst: agent(3),
            src: agent(2),
        };
        let sides = named
            .sides(0x5000, 0x9000, |_| panic!("a named side is not looked up"))
            .unwrap();
        assert_eq!(handles(sides), [(3, 0x5000), (2, 0x9000)]);
        let mut looked_up = Vec::new();
        let sides = CopyAgents::FromAddresses
            .sides(0x5000, 0x9000, |address| {
                looked_up.push(address);
                Ok((agent(address as u64 >> 12), address + 1))
            })
            .unwrap();
        assert_eq!(handles(sides), [(5, 0x5001), (9, 0x9001)]);
        assert_eq!(looked_up, [0x5000, 0x9000]);
        let refused = Error::Driver(driver_error(
            "hsa_amd_pointer_info",
            sys::HSA_STATUS_ERROR_INVALID_ARGUMENT,
        ));
        assert_eq!(
            CopyAgents::FromAddresses
                .sides(0x5000, 0x9000, |_| Err(refused.clone()))
                .unwrap_err(),
            refused
        );
    }

    #[test]
    fn locked_and_cpu_pool_memory_is_pinned_and_the_rest_is_not() {
        let cpu = sys::hsa_agent_t { handle: 7 };
        let locked = info(sys::HSA_EXT_POINTER_TYPE_LOCKED, 0x1000, 0x9000, 4096, 3);
        assert_eq!(
            pinned_extent(&locked, cpu),
            Some((ByteRange::new(0x1000, 4096).unwrap(), 0x9000))
        );
        let host_pool = info(sys::HSA_EXT_POINTER_TYPE_HSA, 0, 0x5000, 8192, 7);
        assert_eq!(
            pinned_extent(&host_pool, cpu),
            Some((ByteRange::new(0x5000, 8192).unwrap(), 0x5000))
        );
        let device = info(sys::HSA_EXT_POINTER_TYPE_HSA, 0, 0x5000, 8192, 3);
        assert_eq!(pinned_extent(&device, cpu), None);
        let unknown = info(sys::HSA_EXT_POINTER_TYPE_UNKNOWN, 0x1000, 0, 4096, 0);
        assert_eq!(pinned_extent(&unknown, cpu), None);
        let empty = info(sys::HSA_EXT_POINTER_TYPE_LOCKED, 0x1000, 0x9000, 0, 3);
        assert_eq!(pinned_extent(&empty, cpu), None);
    }
}
