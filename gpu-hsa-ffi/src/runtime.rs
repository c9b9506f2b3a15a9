//! An initialised HSA runtime: hsa_init at open, hsa_shut_down when dropped, and the GPU and
//! CPU agents it reports (the backend's devices, and the host its pinned memory belongs to).

use core::ffi::c_void;

use gpu_core::{DriverError, Error, Result};

use crate::library::Hsa;
use crate::result::{check, driver_error};
use crate::sys;

/// One reference to the process's HSA runtime (hsa_init counts references; each
/// `HsaRuntime` holds one and gives it back when dropped).
#[derive(Debug)]
pub struct HsaRuntime {
    hsa: &'static Hsa,
    /// The GPU agents, in the order hsa_iterate_agents reported them.
    gpu_agents: Vec<sys::hsa_agent_t>,
    /// The CPU agents, in the same order.
    cpu_agents: Vec<sys::hsa_agent_t>,
}

impl HsaRuntime {
    /// Opens the process-wide HSA library ([`Hsa::global`]) and initialises it.
    ///
    /// # Errors
    /// As [`HsaRuntime::with_library`], and the loader's errors without the library.
    pub fn new() -> Result<Self> {
        Self::with_library(Hsa::global()?)
    }

    /// hsa_init, then the GPU and CPU agents (hsa_iterate_agents, hsa_agent_get_info of the
    /// device type). Without /dev/kfd, ROCm 5.2.3's hsa_init reports
    /// `HSA_STATUS_ERROR_OUT_OF_RESOURCES` ([`crate::result::reports_no_device`] says so).
    ///
    /// # Errors
    /// [`Error::Driver`] from hsa_init or the agent queries; after hsa_init succeeded, a failed
    /// query gives the reference back before returning.
    pub fn with_library(hsa: &'static Hsa) -> Result<Self> {
        // Looked up first, so that the error path below cannot leave the runtime initialised.
        hsa.hsa_shut_down()?;
        let init = hsa.hsa_init()?;
        // SAFETY: no arguments; the runtime counts references itself.
        check("hsa_init", unsafe { init() })?;
        let mut runtime = Self {
            hsa,
            gpu_agents: Vec::new(),
            cpu_agents: Vec::new(),
        };
        let scan = agents(hsa)?;
        runtime.gpu_agents = scan.gpus;
        runtime.cpu_agents = scan.cpus;
        Ok(runtime)
    }

    /// The GPU agents the runtime reported.
    pub fn gpu_agents(&self) -> &[sys::hsa_agent_t] {
        &self.gpu_agents
    }

    /// The CPU agents the runtime reported.
    pub fn cpu_agents(&self) -> &[sys::hsa_agent_t] {
        &self.cpu_agents
    }

    /// The library the runtime was initialised through.
    pub fn library(&self) -> &'static Hsa {
        self.hsa
    }
}

impl Drop for HsaRuntime {
    fn drop(&mut self) {
        if let Ok(shut_down) = self.hsa.hsa_shut_down() {
            // SAFETY: this value holds one reference from a successful hsa_init.
            let _ = unsafe { shut_down() };
        }
    }
}

/// What the agent callback collects: the GPU and CPU agents, or the first failure.
struct AgentScan<'a> {
    hsa: &'a Hsa,
    gpus: Vec<sys::hsa_agent_t>,
    cpus: Vec<sys::hsa_agent_t>,
    failure: Option<DriverError>,
}

/// hsa_iterate_agents' callback: keeps GPU and CPU agents.
unsafe extern "C" fn collect_agent(
    agent: sys::hsa_agent_t,
    data: *mut c_void,
) -> sys::hsa_status_t {
    // SAFETY: `data` is the `AgentScan` that `gpu_agents` passed, alive for the iteration.
    let scan = unsafe { &mut *data.cast::<AgentScan<'_>>() };
    let Ok(get_info) = scan.hsa.hsa_agent_get_info() else {
        return sys::HSA_STATUS_ERROR;
    };
    let mut device_type: sys::hsa_device_type_t = 0;
    // SAFETY: HSA_AGENT_INFO_DEVICE writes one hsa_device_type_t.
    let code = unsafe {
        get_info(
            agent,
            sys::HSA_AGENT_INFO_DEVICE,
            (&mut device_type as *mut sys::hsa_device_type_t).cast(),
        )
    };
    if code != sys::HSA_STATUS_SUCCESS {
        scan.failure = Some(driver_error("hsa_agent_get_info", code));
        return code;
    }
    match device_type {
        sys::HSA_DEVICE_TYPE_GPU => scan.gpus.push(agent),
        sys::HSA_DEVICE_TYPE_CPU => scan.cpus.push(agent),
        _ => {}
    }
    sys::HSA_STATUS_SUCCESS
}

/// The GPU and CPU agents of an initialised runtime.
fn agents(hsa: &Hsa) -> Result<AgentScan<'_>> {
    let iterate = hsa.hsa_iterate_agents()?;
    hsa.hsa_agent_get_info()?;
    let mut scan = AgentScan {
        hsa,
        gpus: Vec::new(),
        cpus: Vec::new(),
        failure: None,
    };
    // SAFETY: the callback only reads `scan` through the pointer while the iteration runs.
    let code = unsafe {
        iterate(
            Some(collect_agent),
            (&mut scan as *mut AgentScan<'_>).cast(),
        )
    };
    if let Some(failure) = scan.failure.take() {
        return Err(Error::Driver(failure));
    }
    check("hsa_iterate_agents", code)?;
    Ok(scan)
}
