//! The node agents that exist: `gantry node <agent>` and the sim kubelet's in-process
//! operand containers are both built from [`AGENTS`].

use std::collections::BTreeMap;
use std::sync::Arc;

use clap::{ArgMatches, Command, FromArgMatches};

use super::contract::{Agent, AgentError, Host, Run, Shutdown};
use super::device_plugin::DevicePlugin;
use super::discovery::Discovery;
use super::exporter::Exporter;
use super::mig_manager::MigManager;
use super::toolkit::Toolkit;
use super::validator::Validator;

/// Every node agent, in `gantry node --help` order.
pub static AGENTS: &[Entry] = &[
    Entry::of::<Toolkit>(),
    Entry::of::<DevicePlugin>(),
    Entry::of::<Discovery>(),
    Entry::of::<Exporter>(),
    Entry::of::<MigManager>(),
    Entry::of::<Validator>(),
];

/// The agent called `name`.
pub fn get(name: &str) -> Option<&'static Entry> {
    AGENTS.iter().find(|a| a.name == name)
}

/// A container's env, by name.
type Env = BTreeMap<String, String>;

/// One agent: its name, its flags, and how to start it from a parsed or a raw command line.
pub struct Entry {
    pub name: &'static str,
    pub about: &'static str,
    /// Run by `gantry node` on a runtime with worker threads.
    pub worker_threads: bool,
    augment: fn(Command) -> Command,
    from_matches: fn(&ArgMatches, Arc<dyn Host>, Shutdown) -> Run,
    from_argv: fn(Vec<String>, &Env, Arc<dyn Host>, Shutdown) -> Run,
}

impl Entry {
    pub const fn of<A: Agent>() -> Entry {
        Entry {
            name: A::NAME,
            about: A::ABOUT,
            worker_threads: A::WORKER_THREADS,
            augment: <A::Args as clap::Args>::augment_args,
            from_matches: start_matches::<A>,
            from_argv: start_argv::<A>,
        }
    }

    /// The `gantry node <name>` subcommand: its flags, env names and help.
    pub fn command(&self) -> Command {
        (self.augment)(Command::new(self.name)).about(self.about)
    }

    /// Start it on the matches of [`Entry::command`] (clap read the process's argv and env).
    pub fn start(&self, matches: &ArgMatches, host: Arc<dyn Host>, shutdown: Shutdown) -> Run {
        (self.from_matches)(matches, host, shutdown)
    }

    /// Start it on a command line (what follows `gantry node <name>`), its env-backed flags
    /// read from `env` as the process would read its own env (the simulated container's).
    pub fn start_argv(
        &self,
        argv: Vec<String>,
        env: &Env,
        host: Arc<dyn Host>,
        shutdown: Shutdown,
    ) -> Run {
        (self.from_argv)(argv, env, host, shutdown)
    }
}

fn start_matches<A: Agent>(m: &ArgMatches, host: Arc<dyn Host>, shutdown: Shutdown) -> Run {
    let args = A::Args::from_arg_matches(m).map_err(AgentError::Usage);
    launch::<A>(args, host, shutdown)
}

fn start_argv<A: Agent>(
    argv: Vec<String>,
    env: &Env,
    host: Arc<dyn Host>,
    shutdown: Shutdown,
) -> Run {
    let bin = format!("gantry node {}", A::NAME);
    let args =
        crate::args::parse::<A::Args>(&bin, &A::normalize(argv), env).map_err(AgentError::Usage);
    launch::<A>(args, host, shutdown)
}

fn launch<A: Agent>(
    args: Result<A::Args, AgentError>,
    host: Arc<dyn Host>,
    shutdown: Shutdown,
) -> Run {
    Box::pin(async move {
        let options = A::options(args?, host.as_ref()).map_err(|e| match e {
            AgentError::Failed(e) => AgentError::Options(e),
            e => e,
        })?;
        A::run(options, host, shutdown).await
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::GpuArgs;
    use crate::host::HostPaths;
    use futures::future::BoxFuture;

    /// A simulated host with no GPUs and no API.
    #[derive(Default)]
    struct Bare(HostPaths);

    impl Host for Bare {
        fn paths(&self) -> &HostPaths {
            &self.0
        }
        fn hostname(&self) -> String {
            "n1".into()
        }
        fn gpus(
            &self,
            _: &GpuArgs,
            for_what: &str,
        ) -> Result<Arc<dyn gantry_gpu::Backend>, String> {
            Err(format!("no GPUs {for_what}"))
        }
        fn client(
            &self,
            _: Option<&std::path::Path>,
        ) -> BoxFuture<'static, Result<kube::Client, String>> {
            Box::pin(async { Err("no API".to_string()) })
        }
        fn print(&self, _: &str) {}
        fn simulated(&self) -> bool {
            true
        }
    }

    async fn start(agent: &str, argv: &[&str], env: &[(&str, &str)]) -> Result<(), AgentError> {
        let argv = argv.iter().map(|s| s.to_string()).collect();
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        // Stops at once: an agent that idles returns.
        let stop: Shutdown = Box::pin(async {});
        get(agent)
            .unwrap()
            .start_argv(argv, &env, Arc::new(Bare::default()), stop)
            .await
    }

    /// A command line ends the run as it ends the binary: a rejected flag as clap exits, flags
    /// that make no options with the flag named, a failed start with its reason.
    #[tokio::test]
    async fn runs_end_as_the_binary_would() {
        let e = start("device-plugin", &["--bogus"], &[]).await.unwrap_err();
        assert!(
            matches!(&e, AgentError::Usage(c) if c.exit_code() == 2),
            "{e}"
        );
        // The env is the given one (the container's), read as clap reads the process's.
        let e = start("device-plugin", &[], &[("CONFIG_MAP", "bad")])
            .await
            .unwrap_err();
        assert!(matches!(&e, AgentError::Options(_)), "{e}");
        assert!(e.to_string().contains("--config-map \"bad\""), "{e}");
        let e = start("exporter", &[], &[]).await.unwrap_err();
        assert!(matches!(&e, AgentError::Failed(_)), "{e}");
        assert_eq!(e.to_string(), "no GPUs (NVML cannot load for the exporter)");
        // FAIL_ON_INIT_ERROR=false: no GPUs, so it idles until stopped.
        start("device-plugin", &[], &[("FAIL_ON_INIT_ERROR", "false")])
            .await
            .unwrap();
        // The one-shot MIG apply is not run on a simulated node.
        let e = start("mig-manager", &["--config", "all-1g.10gb"], &[])
            .await
            .unwrap_err();
        assert!(e.to_string().contains("run it as the daemon"), "{e}");
    }

    #[test]
    fn every_agent_once_with_its_flags() {
        let names: Vec<&str> = AGENTS.iter().map(|a| a.name).collect();
        assert_eq!(
            names,
            [
                "toolkit",
                "device-plugin",
                "discovery",
                "exporter",
                "mig-manager",
                "validator"
            ]
        );
        for a in AGENTS {
            assert!(get(a.name).is_some_and(|g| std::ptr::eq(g, a)));
            // Each command is a valid clap command (debug_assert checks names and conflicts).
            a.command().debug_assert();
        }
        assert!(get("frobnicate").is_none());
    }
}
