//! What every agent's flags share, and the one way to parse an agent's command line.
//!
//! Each agent's flags and env variables are one clap `Args` type in its module
//! (`device_plugin::args`, `discovery::args`, …) with a conversion to its options. The
//! `gantry node <agent>` commands parse them with clap against the process (argv, env);
//! the simulated kubelet parses a container's `args` with [`parse`], env taken from the
//! container's env, so a flag the binary would reject fails the simulated container too.

use std::any::TypeId;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::parser::ValueSource;
use clap::{Args as _, Command, FromArgMatches};
use gantry_gpu::{Backend, NvmlBackend, SimBackend, SimConfig};
use gantry_k8s_rules::MigStrategy;

/// A flag or env value that clap accepted but that does not make sense (a malformed
/// `namespace/name`, an address): the error names the flag and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {value:?}: {what}")]
pub struct ArgsError {
    pub flag: String,
    pub value: String,
    pub what: String,
}

impl ArgsError {
    pub fn new(flag: &str, value: &str, what: impl Into<String>) -> Self {
        ArgsError {
            flag: flag.to_string(),
            value: value.to_string(),
            what: what.into(),
        }
    }
}

/// `--mig-strategy` / `MIG_STRATEGY` for every agent: the shared type, its names in `--help`.
pub fn mig_strategy_parser() -> impl TypedValueParser<Value = MigStrategy> {
    PossibleValuesParser::new(MigStrategy::ALL.map(MigStrategy::as_str))
        .try_map(|s| s.parse::<MigStrategy>())
}

/// `NAMESPACE/NAME` of a flag.
pub fn namespaced(flag: &str, v: &str) -> Result<(String, String), ArgsError> {
    crate::mig::daemon::parse_namespaced(v)
        .ok_or_else(|| ArgsError::new(flag, v, "expected NAMESPACE/NAME"))
}

/// `HOST:PORT`, or `:PORT` for every interface.
pub fn listen_address(flag: &str, v: &str) -> Result<std::net::SocketAddr, ArgsError> {
    match v.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}").parse(),
        None => v.parse(),
    }
    .map_err(|_| ArgsError::new(flag, v, "want HOST:PORT or :PORT"))
}

/// Where an agent reads GPU facts from: NVML, or simulated GPUs (`--sim-model`).
#[derive(clap::Args, Clone, Debug)]
pub struct GpuArgs {
    /// Driver installation root to load libnvidia-ml.so.1 from (`/run/nvidia/driver` with the
    /// driver container); the usual library locations are tried as well.
    #[arg(long, alias = "nvidia-driver-root", env = "NVIDIA_DRIVER_ROOT")]
    pub driver_root: Option<PathBuf>,
    /// Run on simulated GPUs of this model (`H100-80GB`, `A100-40GB`, ...) instead of NVML.
    /// On a simulated node the node's own GPUs are used whatever this says.
    #[arg(long)]
    pub sim_model: Option<String>,
    /// Number of simulated GPUs.
    #[arg(long, default_value_t = 8)]
    pub sim_gpus: u32,
}

impl GpuArgs {
    /// Open the backend. Without NVML the error is one line: `NVML library not found: …; is
    /// the NVIDIA driver installed? set --driver-root`.
    pub fn open(&self) -> Result<Arc<dyn Backend>, String> {
        if let Some(model) = &self.sim_model {
            let config = SimConfig::for_model(model, self.sim_gpus, 1)
                .map_err(|e| format!("--sim-model: {e}"))?;
            return Ok(Arc::new(SimBackend::new(config)));
        }
        let backend = NvmlBackend::open(self.driver_root.as_deref()).map_err(|e| e.to_string())?;
        Ok(Arc::new(backend))
    }
}

/// The binary's global `--log` (`gantry --log`), which clap accepts after `node <agent>` too.
#[derive(clap::Args, Clone, Debug)]
struct GlobalArgs {
    /// Log filter of the process (in the sim the filter is the simulator's own).
    #[arg(long, env = "GANTRY_LOG")]
    log: Option<String>,
}

/// Parse `argv` (what follows `gantry node <agent>`) as the agent's process would, its
/// env-backed options read from `env` (the container's env), never from this process's env.
///
/// clap reads `env = "VAR"` from the process when the command is built, so the env names are
/// taken off the arguments and the container's values supplied the way clap would use them: an
/// option not on the command line gets `--name=VALUE` appended (the value parser, conflicts and
/// `requires` see it as clap sees an env value); a flag gets the value as its default, which
/// clap runs through the flag's parser as it runs an env value (`true`/`false`).
pub fn parse<A: clap::Args + FromArgMatches + 'static>(
    bin: &str,
    argv: &[String],
    env: &BTreeMap<String, String>,
) -> Result<A, clap::Error> {
    let base = || {
        let cmd = Command::new(bin.to_string())
            .bin_name(bin.to_string())
            .no_binary_name(true);
        A::augment_args(GlobalArgs::augment_args(cmd))
    };
    let (reference, no_env) = &*built::<A>(bin, base);
    let given = given::<A>(bin, argv, reference, no_env);
    let mut full = argv.to_vec();
    let mut flags_from_env: BTreeMap<String, String> = BTreeMap::new();
    for a in reference.get_arguments() {
        let id = a.get_id().as_str();
        let Some(value) = a
            .get_env()
            .and_then(|var| env.get(var.to_str()?))
            .filter(|_| !given.contains(id))
        else {
            continue;
        };
        if a.get_action().takes_values() {
            let name = match (a.get_long(), a.get_short()) {
                (Some(long), _) => format!("--{long}"),
                (None, Some(short)) => format!("-{short}"),
                // Positional: no agent has one with an env name.
                (None, None) => continue,
            };
            full.push(format!("{name}={value}"));
        } else {
            flags_from_env.insert(id.to_string(), value.clone());
        }
    }
    let cmd = if flags_from_env.is_empty() {
        no_env.clone()
    } else {
        no_env
            .clone()
            .mut_args(|a| match flags_from_env.get(a.get_id().as_str()) {
                Some(v) => a.default_value(v.clone()),
                None => a,
            })
    };
    let matches = cmd.try_get_matches_from(&full)?;
    A::from_arg_matches(&matches).map_err(|e| e.format(&mut base()))
}

/// Which options are on the command line `argv` (errors are found by the full parse). Kept
/// per argument type and command line: every node's pod of one DaemonSet has the same
/// `args` (what differs, the node's name, comes from the env), so the simulated kubelets
/// parse a few dozen distinct command lines thousands of times.
fn given<A: 'static>(
    bin: &str,
    argv: &[String],
    reference: &Command,
    no_env: &Command,
) -> Arc<BTreeSet<String>> {
    static CACHE: Cache<(TypeId, String, Vec<String>), BTreeSet<String>> = OnceLock::new();
    /// Distinct command lines kept; past that the cache starts over (bounded memory).
    const KEPT: usize = 256;
    let key = (TypeId::of::<A>(), bin.to_string(), argv.to_vec());
    kept(&CACHE, key, KEPT, || {
        no_env
            .clone()
            .ignore_errors(true)
            .try_get_matches_from(argv)
            .map(|m| {
                reference
                    .get_arguments()
                    .map(|a| a.get_id().as_str())
                    .filter(|id| m.value_source(id) == Some(ValueSource::CommandLine))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// An agent's commands, built once per process and argument type: with its env names (to
/// read them) and without (to parse). Building and checking a clap command costs more than
/// parsing with it, and a simulated node starts every agent it runs (thousands a minute in
/// `gantry bench operator`).
fn built<A: clap::Args + 'static>(
    bin: &str,
    base: impl Fn() -> Command,
) -> Arc<(Command, Command)> {
    static CACHE: Cache<(TypeId, String), (Command, Command)> = OnceLock::new();
    // One entry per agent type and binary name: a handful.
    kept(
        &CACHE,
        (TypeId::of::<A>(), bin.to_string()),
        usize::MAX,
        || {
            let mut no_env = base().mut_args(|a| a.env(None::<&str>));
            no_env.build();
            (base(), no_env)
        },
    )
}

/// A process-wide cache of what parsing keeps.
type Cache<K, V> = OnceLock<Mutex<HashMap<K, Arc<V>>>>;

/// The value kept under `key`, made by `make` (outside the lock) when there is none; past
/// `bound` entries the cache starts over.
fn kept<K: Eq + std::hash::Hash, V>(
    cache: &Cache<K, V>,
    key: K,
    bound: usize,
    make: impl FnOnce() -> V,
) -> Arc<V> {
    let cache = cache.get_or_init(Mutex::default);
    if let Some(v) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return v.clone();
    }
    let v = Arc::new(make());
    let mut c = cache.lock().unwrap_or_else(|p| p.into_inner());
    if c.len() >= bound {
        c.clear();
    }
    c.insert(key, v.clone());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Args, Debug)]
    struct T {
        #[arg(long, env = "T_NAME")]
        name: Option<String>,
        #[arg(long, env = "T_LIST", value_delimiter = ',')]
        list: Vec<String>,
        #[arg(long, env = "T_ON")]
        on: bool,
        #[arg(long, env = "T_A", conflicts_with = "b")]
        a: Option<String>,
        #[arg(long, env = "T_B")]
        b: Option<String>,
    }

    fn env(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn argv(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_beat_the_container_env_and_env_fills_the_rest() {
        let e = env(&[("T_NAME", "fromenv"), ("T_LIST", "x,y"), ("T_ON", "true")]);
        let t: T = parse("t", &argv(&["--name", "flag"]), &e).unwrap();
        assert_eq!(t.name.as_deref(), Some("flag"));
        assert_eq!(t.list, ["x", "y"]);
        assert!(t.on);
        let t: T = parse("t", &[], &env(&[("T_ON", "false")])).unwrap();
        assert!(!t.on && t.name.is_none() && t.list.is_empty());
        // `--log` is the binary's global flag.
        parse::<T>("t", &argv(&["--log", "debug"]), &BTreeMap::new()).unwrap();
    }

    #[test]
    fn rejects_what_clap_rejects_with_its_exit_code() {
        let e = parse::<T>("t", &argv(&["--bogus"]), &BTreeMap::new()).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.render().to_string().contains("'--bogus'"), "{e}");
        // A flag's env value goes through its parser, as clap's env does.
        let e = parse::<T>("t", &[], &env(&[("T_ON", "1")])).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.render().to_string().contains("'1'"), "{e}");
        // An env value conflicts like a flag.
        let e = parse::<T>("t", &argv(&["--b", "x"]), &env(&[("T_A", "y")])).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
        // --help exits 0 with the help text.
        let e = parse::<T>("t", &argv(&["--help"]), &BTreeMap::new()).unwrap_err();
        assert_eq!(e.exit_code(), 0);
    }

    #[test]
    fn one_command_line_parsed_again_reads_each_containers_env() {
        // The second parse of a command line finds what is on it kept; the env still differs.
        let line = argv(&["--list", "a"]);
        for (name, on) in [("n1", "true"), ("n2", "false"), ("n3", "true")] {
            let e = env(&[("T_NAME", name), ("T_ON", on), ("T_LIST", "ignored")]);
            let t: T = parse("t-again", &line, &e).unwrap();
            assert_eq!(t.name.as_deref(), Some(name));
            assert_eq!(t.on, on == "true");
            assert_eq!(t.list, ["a"], "the flag beats the env every time");
        }
        // Another command line of the same type is not taken for the first.
        let t: T = parse(
            "t-again",
            &argv(&["--name", "flag"]),
            &env(&[("T_NAME", "e")]),
        )
        .unwrap();
        assert_eq!(t.name.as_deref(), Some("flag"));
        assert!(t.list.is_empty());
    }

    #[test]
    fn the_process_env_is_not_read() {
        // PATH is set in every test process; an arg reading it must not see it.
        #[derive(clap::Args)]
        struct P {
            #[arg(long, env = "PATH")]
            path: Option<String>,
        }
        let p: P = parse("p", &[], &BTreeMap::new()).unwrap();
        assert!(p.path.is_none());
    }
}
