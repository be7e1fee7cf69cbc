//! IMEX channels (`imex.channelIDs`, `--imex-channel-ids`): which configured channels the
//! node has, and whether the config can be served with them.
//!
//! A channel is the device node `<dir>/channel<N>` (the driver creates
//! `/dev/nvidia-caps-imex-channels/channel0` on IMEX-capable systems). As upstream, a channel
//! that is not there is left out of every container, unless `imex.required` says the plugin
//! must not serve without it.

use std::path::Path;

use super::error::DevicePluginError;
use super::settings::Settings;

/// Where the driver puts the IMEX channel device nodes.
pub const CHANNEL_DIR: &str = "/dev/nvidia-caps-imex-channels";

/// The configured channels whose device node exists under `dir` (the shell's one read).
pub fn present(dir: &Path, wanted: &[u32]) -> Vec<u32> {
    wanted
        .iter()
        .copied()
        .filter(|c| dir.join(format!("channel{c}")).exists())
        .collect()
}

/// Whether `settings` can be served when `present` of its channels exist.
pub fn check(settings: &Settings, present: &[u32]) -> Result<(), DevicePluginError> {
    let imex = &settings.imex;
    if imex.required
        && let Some(&missing) = imex.channel_ids.iter().find(|c| !present.contains(c))
    {
        return Err(DevicePluginError::ImexChannelMissing {
            channel: missing,
            path: format!("{CHANNEL_DIR}/channel{missing}"),
        });
    }
    // Gantry's CDI spec (`gantry node toolkit`) has no IMEX channel devices, so a CDI-only
    // device list could not hand the channel to the container.
    if !present.is_empty() && settings.device_list_strategies.iter().all(|s| s.is_cdi()) {
        return Err(DevicePluginError::ImexWithCdiOnly);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_plugin::settings::{DeviceListStrategy, Imex};

    fn with(ids: &[u32], required: bool) -> Settings {
        Settings {
            imex: Imex {
                channel_ids: ids.to_vec(),
                required,
            },
            ..Settings::default()
        }
    }

    #[test]
    fn missing_channels_are_left_out_unless_required() {
        let dir = tempfile::tempdir().unwrap();
        assert!(present(dir.path(), &[0]).is_empty());
        assert!(check(&with(&[0], false), &[]).is_ok());
        let e = check(&with(&[0], true), &[]).unwrap_err().to_string();
        assert!(e.contains("channel0") && e.contains("imex.required"), "{e}");
        std::fs::write(dir.path().join("channel0"), "").unwrap();
        assert_eq!(present(dir.path(), &[0]), vec![0]);
        assert!(check(&with(&[0], true), &[0]).is_ok());
    }

    #[test]
    fn a_cdi_only_device_list_cannot_carry_a_channel() {
        let mut s = with(&[0], false);
        s.device_list_strategies = [DeviceListStrategy::CdiCri].into();
        assert!(check(&s, &[]).is_ok());
        let e = check(&s, &[0]).unwrap_err().to_string();
        assert!(e.contains("envvar"), "{e}");
        s.device_list_strategies.insert(DeviceListStrategy::Envvar);
        assert!(check(&s, &[0]).is_ok());
    }
}
