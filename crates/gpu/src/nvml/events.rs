//! NVML event sets as an [`EventStream`], keeping the MIG instance of each event.

use std::collections::HashMap;
use std::time::Duration;

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::{EventSet, Nvml};

use super::{NvmlBackend, err, optional, raw};
use crate::backend::{Backend, EventStream};
use crate::error::{GpuError, Result};
use crate::types::Event;

/// "Not attributable to a MIG instance" in event data.
const NO_INSTANCE: u32 = u32::MAX;

impl NvmlBackend {
    pub(super) fn subscribe_events(&self, mask: u64) -> Result<Box<dyn EventStream>> {
        let mut set = self
            .nvml
            .create_event_set()
            .map_err(|e| err(0, "nvmlEventSetCreate", e))?;
        let mut uuids = HashMap::new();
        for gpu in 0..self.device_count()? {
            let d = self.dev(gpu)?;
            uuids.insert(d.uuid().map_err(|e| err(gpu, "nvmlDeviceGetUUID", e))?, gpu);
            let supported = match optional(d.supported_event_types()) {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(e) => return Err(err(gpu, "nvmlDeviceGetSupportedEventTypes", e)),
            };
            let wanted = supported & EventTypes::from_bits_truncate(mask);
            if wanted.is_empty() {
                continue;
            }
            set = d
                .register_events(wanted, set)
                .map_err(|e| err(gpu, "nvmlDeviceRegisterEvents", e.error))?;
        }
        Ok(Box::new(NvmlEvents {
            nvml: self.nvml,
            set,
            uuids,
        }))
    }
}

struct NvmlEvents {
    nvml: &'static Nvml,
    set: EventSet<'static>,
    uuids: HashMap<String, u32>,
}

impl EventStream for NvmlEvents {
    fn wait(&mut self, timeout: Duration) -> Result<Option<Event>> {
        let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        let Some(ev) = raw::event_wait(self.nvml, &self.set, ms).map_err(|e| GpuError::Nvml {
            call: "nvmlEventSetWait_v2".to_string(),
            message: e.to_string(),
        })?
        else {
            return Ok(None);
        };
        let gpu = match self.uuids.get(&ev.uuid) {
            Some(&g) => g,
            None => self
                .nvml
                .device_by_uuid(ev.uuid.clone())
                .ok()
                .and_then(|d| d.index().ok())
                .unwrap_or(u32::MAX),
        };
        let id = |v: u32| (v != NO_INSTANCE).then_some(v);
        Ok(Some(Event {
            gpu,
            gpu_uuid: ev.uuid,
            kind: ev.kind,
            xid: if ev.kind & crate::types::event_kind::XID_CRITICAL != 0 {
                ev.data
            } else {
                0
            },
            gpu_instance_id: id(ev.gpu_instance_id),
            compute_instance_id: id(ev.compute_instance_id),
        }))
    }
}
