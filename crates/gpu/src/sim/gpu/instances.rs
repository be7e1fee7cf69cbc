//! MIG on one simulated GPU: mode, GPU and compute instances, MIG devices, and which
//! processes may run where.

use super::*;

impl SimGpu {
    pub(super) fn gi(&self, id: u32) -> Result<&SimGi> {
        self.gis
            .iter()
            .find(|g| g.id == id)
            .ok_or_else(|| GpuError::NotFound(format!("GPU instance {id} on GPU {}", self.index())))
    }

    pub(super) fn refuse(&self, reason: impl Into<String>) -> GpuError {
        GpuError::MigRefused {
            gpu: self.index(),
            reason: reason.into(),
        }
    }

    pub(super) fn require_mig(&self) -> Result<()> {
        self.alive()?;
        if !self.model.mig_capable() {
            return Err(self.not_supported(&format!("MIG ({})", self.model.name)));
        }
        if !self.mig.current {
            return Err(self.refuse("MIG mode is not enabled"));
        }
        Ok(())
    }

    pub fn mig_mode(&self) -> Result<MigMode> {
        self.alive()?;
        if !self.model.mig_capable() {
            return Err(self.not_supported(&format!("MIG ({})", self.model.name)));
        }
        Ok(self.mig)
    }

    pub fn set_mig_mode(&mut self, enabled: bool) -> Result<MigMode> {
        self.alive()?;
        if !self.model.mig_capable() {
            return Err(self.not_supported(&format!("MIG ({})", self.model.name)));
        }
        if !enabled && !self.gis.is_empty() {
            return Err(GpuError::InUse {
                gpu: self.index(),
                reason: format!(
                    "{} GPU instance(s) exist; destroy them before disabling MIG",
                    self.gis.len()
                ),
            });
        }
        self.mig.pending = enabled;
        // The driver resets the GPU to apply the mode, which it can only do when idle.
        if self.processes.is_empty() {
            self.mig.current = enabled;
        }
        self.mig_generation += 1;
        Ok(self.mig)
    }

    /// Apply a pending MIG mode and clear volatile state, as a GPU reset does.
    pub fn reset(&mut self) {
        self.lost = false;
        self.last_xid = 0;
        self.processes.clear();
        self.ecc.sbe_volatile = 0;
        self.ecc.dbe_volatile = 0;
        if self.remap.pending {
            self.remap.pending = false;
        }
        if self.mig.current != self.mig.pending {
            self.mig.current = self.mig.pending;
            self.gis.clear();
        }
        self.mig_generation += 1;
    }

    pub(super) fn occupants(&self) -> Vec<Occupant> {
        self.gis
            .iter()
            .map(|g| Occupant {
                profile: g.profile.name.clone(),
                placement: g.placement,
                slices: g.profile.slices,
            })
            .collect()
    }

    pub(super) fn gi_view(g: &SimGi) -> GpuInstance {
        GpuInstance {
            id: g.id,
            profile: g.profile.name.clone(),
            profile_id: g.profile.id,
            placement: g.placement,
            slices: g.profile.slices,
            memory_mib: g.profile.memory_mib,
        }
    }

    pub(super) fn ci_view(g: &SimGi, c: &SimCi) -> ComputeInstance {
        ComputeInstance {
            gpu_instance_id: g.id,
            id: c.id,
            slices: c.slices,
            start: c.start,
            sm_count: g.profile.sm_count * c.slices / g.profile.slices.max(1),
        }
    }

    pub fn gpu_instances(&self) -> Result<Vec<GpuInstance>> {
        self.require_mig()?;
        let mut v: Vec<_> = self.gis.iter().map(Self::gi_view).collect();
        v.sort_by_key(|g| g.id);
        Ok(v)
    }

    pub fn compute_instances(&self, gi: u32) -> Result<Vec<ComputeInstance>> {
        self.require_mig()?;
        let g = self.gi(gi)?;
        Ok(g.cis.iter().map(|c| Self::ci_view(g, c)).collect())
    }

    pub fn create_gi(
        &mut self,
        profile: &str,
        placement: Option<Placement>,
    ) -> Result<GpuInstance> {
        self.require_mig()?;
        let profiles = self.model.mig_profiles();
        let gpu = self.index();
        let p = mig::find_profile(&profiles, profile).map_err(|e| GpuError::MigRefused {
            gpu,
            reason: e.to_string(),
        })?;
        let at = mig::choose_placement(p, placement, &self.occupants()).map_err(|e| {
            GpuError::MigRefused {
                gpu,
                reason: e.to_string(),
            }
        })?;
        let gi = SimGi {
            id: mig::gpu_instance_id(at),
            profile: p.clone(),
            placement: at,
            cis: Vec::new(),
        };
        let view = Self::gi_view(&gi);
        self.gis.push(gi);
        self.mig_generation += 1;
        Ok(view)
    }

    pub fn destroy_gi(&mut self, id: u32) -> Result<()> {
        self.require_mig()?;
        let g = self.gi(id)?;
        if !g.cis.is_empty() {
            return Err(GpuError::InUse {
                gpu: self.index(),
                reason: format!(
                    "GPU instance {id} still has {} compute instance(s)",
                    g.cis.len()
                ),
            });
        }
        if self.processes.iter().any(|p| p.gpu_instance == Some(id)) {
            return Err(GpuError::InUse {
                gpu: self.index(),
                reason: format!("processes run on GPU instance {id}"),
            });
        }
        self.gis.retain(|g| g.id != id);
        self.mig_generation += 1;
        Ok(())
    }

    pub fn create_ci(&mut self, gi: u32, slices: u32) -> Result<ComputeInstance> {
        self.require_mig()?;
        let gpu = self.index();
        let generation = self.mig_generation;
        let seed = self.seed;
        let g = self
            .gis
            .iter_mut()
            .find(|g| g.id == gi)
            .ok_or_else(|| GpuError::NotFound(format!("GPU instance {gi} on GPU {gpu}")))?;
        let total = g.profile.slices;
        let valid = [1u32, 2, 3, 4, 7];
        if slices == 0 || slices > total || !valid.contains(&slices) {
            return Err(GpuError::MigRefused {
                gpu,
                reason: format!(
                    "a {slices}-slice compute instance does not fit GPU instance {gi} ({})",
                    g.profile.name
                ),
            });
        }
        let taken = |s: u32| {
            g.cis
                .iter()
                .any(|c| s < c.start + c.slices && c.start < s + slices)
        };
        let start = (0..total)
            .filter(|s| s % slices == 0 || slices == 3)
            .find(|&s| s + slices <= total && !taken(s))
            .ok_or_else(|| GpuError::MigRefused {
                gpu,
                reason: format!(
                    "no room for a {slices}-slice compute instance in GPU instance {gi} ({})",
                    g.profile.name
                ),
            })?;
        let id = (0..)
            .find(|i| g.cis.iter().all(|c| c.id != *i))
            .unwrap_or(0);
        let h = ids::mix_all(&[seed, u64::from(gi), u64::from(id), generation]);
        let ci = SimCi {
            id,
            start,
            slices,
            uuid: ids::uuid("MIG", h, ids::mix(h)),
        };
        g.cis.push(ci);
        let view = g.cis.last().map(|c| Self::ci_view(g, c));
        self.mig_generation += 1;
        view.ok_or_else(|| GpuError::NotFound(format!("compute instance {id}")))
    }

    pub fn destroy_ci(&mut self, gi: u32, ci: u32) -> Result<()> {
        self.require_mig()?;
        let gpu = self.index();
        if self
            .processes
            .iter()
            .any(|p| p.gpu_instance == Some(gi) && p.compute_instance == Some(ci))
        {
            return Err(GpuError::InUse {
                gpu,
                reason: format!("processes run on compute instance {ci} of GPU instance {gi}"),
            });
        }
        let g = self
            .gis
            .iter_mut()
            .find(|g| g.id == gi)
            .ok_or_else(|| GpuError::NotFound(format!("GPU instance {gi} on GPU {gpu}")))?;
        let before = g.cis.len();
        g.cis.retain(|c| c.id != ci);
        if g.cis.len() == before {
            return Err(GpuError::NotFound(format!(
                "compute instance {ci} in GPU instance {gi} on GPU {gpu}"
            )));
        }
        self.mig_generation += 1;
        Ok(())
    }

    pub fn mig_devices(&self) -> Result<Vec<MigDevice>> {
        self.require_mig()?;
        let mut pairs: Vec<(&SimGi, &SimCi)> = self
            .gis
            .iter()
            .flat_map(|g| g.cis.iter().map(move |c| (g, c)))
            .collect();
        pairs.sort_by_key(|(g, c)| (g.placement.start, c.start));
        Ok(pairs
            .into_iter()
            .enumerate()
            .map(|(i, (g, c))| {
                let p = &g.profile;
                MigDevice {
                    parent: self.index(),
                    index: i as u32,
                    uuid: c.uuid.clone(),
                    gpu_instance_id: g.id,
                    compute_instance_id: c.id,
                    profile: if c.slices == p.slices {
                        p.name.clone()
                    } else {
                        format!("{}c.{}", c.slices, p.name)
                    },
                    gi_profile: p.name.clone(),
                    placement: g.placement,
                    gi_slices: p.slices,
                    ci_slices: c.slices,
                    memory_mib: p.memory_mib,
                    sm_count: p.sm_count * c.slices / p.slices.max(1),
                    engines: p.engines,
                }
            })
            .collect())
    }

    /// Memory of the GPU instance behind a MIG device UUID, if it is on this GPU.
    pub fn mig_device_memory(&self, uuid: &str) -> Option<Result<MemoryInfo>> {
        let g = self
            .gis
            .iter()
            .find(|g| g.cis.iter().any(|c| c.uuid == uuid))?;
        if let Err(e) = self.alive() {
            return Some(Err(e));
        }
        let used: u64 = self
            .processes
            .iter()
            .filter(|p| p.gpu_instance == Some(g.id))
            .map(|p| p.memory_mib)
            .sum::<u64>()
            .min(g.profile.memory_mib);
        Some(Ok(MemoryInfo {
            total_mib: g.profile.memory_mib,
            used_mib: used,
            free_mib: g.profile.memory_mib - used,
            reserved_mib: 0,
        }))
    }

    /// Check that a process may run where it says.
    pub fn check_process(&self, p: &SimProcess) -> Result<()> {
        self.alive()?;
        if !(0.0..=1.0).contains(&p.utilization) || p.utilization.is_nan() {
            return Err(GpuError::InvalidArgument(format!(
                "process {} utilization {} is outside 0.0–1.0",
                p.pid, p.utilization
            )));
        }
        match (self.mig.current, p.gpu_instance) {
            (true, None) => Err(GpuError::InvalidArgument(format!(
                "process {}: GPU {} has MIG enabled; give a GPU instance",
                p.pid,
                self.index()
            ))),
            (false, Some(gi)) => Err(GpuError::InvalidArgument(format!(
                "process {}: GPU {} has MIG disabled, no GPU instance {gi}",
                p.pid,
                self.index()
            ))),
            (true, Some(gi)) => {
                let g = self.gi(gi)?;
                match p.compute_instance {
                    Some(ci) if !g.cis.iter().any(|c| c.id == ci) => {
                        Err(GpuError::NotFound(format!(
                            "compute instance {ci} in GPU instance {gi} on GPU {}",
                            self.index()
                        )))
                    }
                    _ => Ok(()),
                }
            }
            (false, None) => Ok(()),
        }
    }
}
